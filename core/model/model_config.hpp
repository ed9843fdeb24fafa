// The decoder's architecture as one plain struct, read from and written to a Hugging Face
// config.json (transformers 4.x and 5.x spellings). Every family maps onto the same fields, so the
// decoder has no per-family code paths. No torch here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cohort::core::model {

enum class family { gpt2, llama, mistral, qwen2, opt, gptj };
enum class norm_kind { layer_norm, rms_norm };
// How a rotary embedding pairs the dimensions it rotates: Llama's rotate_half (first half with
// second half) or GPT-J's rotate_every_two (even with odd). none = learned absolute positions.
enum class rotary_style { none, half, interleaved };

struct rope_scaling {
  std::string type = "default";  // default | linear | llama3
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  std::int64_t original_max_positions = 0;  // llama3
};

struct model_config {
  family fam = family::llama;
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t max_positions = 0;

  norm_kind norm = norm_kind::rms_norm;
  double norm_eps = 1e-6;
  bool norm_affine = true;     // OPT's layer_norm_elementwise_affine
  std::string activation;      // transformers' ACT2FN name: gelu_new, gelu, relu, silu, ...
  bool gated_mlp = false;      // SwiGLU: down(act(gate(x)) * up(x))

  bool learned_positions = false;
  std::int64_t position_offset = 0;  // OPT stores positions shifted by 2
  rotary_style rotary = rotary_style::none;
  std::int64_t rotary_dim = 0;       // dimensions of each head that rotate (GPT-J: rotary_dim)
  double rope_theta = 10000.0;
  rope_scaling scaling;

  bool conv1d = false;  // GPT-2: fused c_attn and Conv1D weights stored (in, out)
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool lm_head_bias = false;  // GPT-J
  bool parallel_residual = false;  // GPT-J: x + attn(ln(x)) + mlp(ln(x))
  bool norm_before = true;         // OPT's do_layer_norm_before
  bool final_norm = true;
  bool tie_word_embeddings = false;
  std::int64_t word_embed_proj_dim = 0;  // OPT: project_in/out when != hidden_size
  std::optional<std::int64_t> pad_token_id;  // embedding padding_idx: that row gets no gradient
  std::vector<std::int64_t> sliding_window;  // per layer; 0 = full causal attention
  bool scale_attn_weights = true;              // GPT-2
  bool scale_attn_by_inverse_layer_idx = false;  // GPT-2
  // Dropout probabilities, applied only while the module is in training mode.
  double embed_dropout = 0.0;       // on the input embeddings (GPT-2/GPT-J embd_pdrop, OPT dropout)
  double attention_dropout = 0.0;   // on the attention probabilities
  double residual_dropout = 0.0;    // on each branch before its residual add (resid_pdrop, OPT dropout)
  double activation_dropout = 0.0;  // inside the MLP after the activation (OPT)
  double initializer_range = 0.02;
  std::string dtype = "float32";  // float32 | float16 | bfloat16, as written in config.json

  nlohmann::json source = nlohmann::json::object();  // config.json as read; kept when writing
};

// Parses a config.json object. `origin` (a path) prefixes every error. Throws model_error
// (bad_config) naming the key for a missing required key, a wrong type or an unknown model_type.
model_config parse_config(const nlohmann::json& json, const std::string& origin);
// Reads and parses DIR/config.json or a config file path.
model_config read_config(const std::string& path);
// config.json for this architecture as transformers writes it: the source keys, then the family's
// own keys, architectures, model_type and dtype.
nlohmann::json to_hf_json(const model_config& config);

const char* family_name(family f);       // "gpt2", "llama", ...
const char* architecture_name(family f);  // "GPT2LMHeadModel", "LlamaForCausalLM", ...

}  // namespace cohort::core::model

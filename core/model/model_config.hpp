// The decoder's architecture as one plain struct, read from and written to a Hugging Face
// config.json (transformers 4.x and 5.x spellings). Every family maps onto the same fields, so the
// decoder has no per-family code paths. T5, an encoder-decoder, has a struct of its own
// (t5_config). No torch here.
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
  // Embedding padding_idx (that row gets no gradient) in the families whose transformers
  // embedding has one (llama, mistral, qwen2, opt); for a sequence classifier also the id whose
  // last non-occurrence in a row is where the score is read (every family).
  std::optional<std::int64_t> pad_token_id;
  // 0: a causal LM (its LM head). > 0: transformers' <Family>ForSequenceClassification: the
  // `score` head (num_labels, E) without bias in place of the LM head, read from config.json's
  // architectures (…ForSequenceClassification) with num_labels (or id2label's size, else 1).
  std::int64_t num_labels = 0;
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
// (bad_config) naming the key for a missing required key, a wrong type or an unknown model_type
// (model_type "t5" too: it is read by parse_t5_config).
model_config parse_config(const nlohmann::json& json, const std::string& origin);
// Reads and parses DIR/config.json or a config file path.
model_config read_config(const std::string& path);
// config.json for this architecture as transformers writes it: the source keys, then the family's
// own keys, architectures, model_type and dtype; a sequence classifier (num_labels > 0) gets
// <Family>ForSequenceClassification, num_labels, id2label / label2id (LABEL_i) and pad_token_id.
nlohmann::json to_hf_json(const model_config& config);

// DIR/config.json or a config file as a JSON object. Throws model_error (bad_config) naming the
// file when it cannot be read or is not JSON; `file` receives the path read.
nlohmann::json read_config_json(const std::string& path, std::string* file = nullptr);
// Whether a config.json object describes a T5 (model_type "t5").
bool is_t5(const nlohmann::json& config);

// T5 (v1.0 and v1.1) as transformers' T5Config describes it. What it cannot run is refused.
struct t5_config {
  std::int64_t vocab_size = 0;
  std::int64_t d_model = 0;            // hidden size
  std::int64_t d_kv = 0;               // per-head size; inner attention size = num_heads * d_kv
  std::int64_t d_ff = 0;               // feed-forward size
  std::int64_t num_layers = 0;         // encoder blocks
  std::int64_t num_decoder_layers = 0;  // decoder blocks (num_layers when absent)
  std::int64_t num_heads = 0;
  std::int64_t relative_attention_num_buckets = 32;
  std::int64_t relative_attention_max_distance = 128;
  std::string feed_forward_proj = "relu";  // relu | gated-gelu | gated-silu (also gelu, silu)
  std::string activation;                  // derived: relu, gelu_new (gated-gelu), gelu, silu
  bool gated = false;                      // derived: "gated-" prefix, wi_0 / wi_1 in place of wi
  double layer_norm_epsilon = 1e-6;
  double dropout_rate = 0.1;
  double initializer_factor = 1.0;
  // The head is shared.weight unless tie_word_embeddings is false as written in config.json (then
  // lm_head.weight, as T5 v1.1 checkpoints store it; transformers 5 forces the field to true on
  // load and writes it so). scale_decoder_outputs: the decoder output times d_model^-0.5 before
  // the head; as config.json says, else true unless tie_word_embeddings is false (transformers 5's
  // rule; v1.0 scales, v1.1 does not).
  bool tie_word_embeddings = true;
  bool scale_decoder_outputs = true;
  std::int64_t decoder_start_token_id = 0;  // pad_token_id when absent
  std::int64_t pad_token_id = 0;
  std::string dtype = "float32";
  nlohmann::json source = nlohmann::json::object();  // config.json as read; kept when writing
};

// Parses a T5 config.json object; errors name `origin` and the field, and for a value it cannot
// run (feed_forward_proj, a size, a token id outside the vocabulary) what is allowed.
t5_config parse_t5_config(const nlohmann::json& json, const std::string& origin);
t5_config read_t5_config(const std::string& path);  // DIR/config.json or a config file
// config.json as transformers writes it: the source keys, then T5's own, architectures
// ["T5ForConditionalGeneration"], model_type "t5" and dtype.
nlohmann::json to_hf_json(const t5_config& config);

const char* family_name(family f);       // "gpt2", "llama", ...
const char* architecture_name(family f);  // "GPT2LMHeadModel", "LlamaForCausalLM", ...
// "GPT2ForSequenceClassification", "LlamaForSequenceClassification", ...
const char* classifier_architecture_name(family f);
// Whether transformers' token embedding of the family has padding_idx = pad_token_id (llama,
// mistral, qwen2, opt; not gpt2, gptj).
bool has_embedding_padding_idx(family f);

}  // namespace cohort::core::model

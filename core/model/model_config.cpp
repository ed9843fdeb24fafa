// Reading and writing config.json per family; the defaults are those of transformers' config
// classes (GPT2Config, LlamaConfig, MistralConfig, Qwen2Config, OPTConfig, GPTJConfig).
#include "core/model/model_config.hpp"

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "core/model/model_error.hpp"

namespace cohort::core::model {
namespace {

using json = nlohmann::json;

// Typed access to one config object; every error names the origin file and the key.
class reader {
 public:
  reader(const json& j, std::string origin) : j_(j), origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw model_error(model_errc::bad_config, origin_ + ": " + what);
  }
  // First of `keys` present and not null, or nullptr.
  const json* find(std::initializer_list<const char*> keys, std::string* found = nullptr) const {
    for (const char* k : keys) {
      auto it = j_.find(k);
      if (it != j_.end() && !it->is_null()) {
        if (found) *found = k;
        return &*it;
      }
    }
    return nullptr;
  }
  std::int64_t integer(std::initializer_list<const char*> keys, std::optional<std::int64_t> def,
                       std::int64_t min = 1) const {
    std::string key;
    const json* v = find(keys, &key);
    if (!v) {
      if (!def) fail("missing required key '" + std::string(*keys.begin()) + "' (an integer)");
      return *def;
    }
    if (!v->is_number_integer()) fail("key '" + key + "' must be an integer, got " + v->dump());
    std::int64_t x = v->get<std::int64_t>();
    if (x < min) fail("key '" + key + "' must be >= " + std::to_string(min) + ", got " + v->dump());
    return x;
  }
  std::optional<std::int64_t> optional_integer(const char* key) const {
    const json* v = find({key});
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) fail("key '" + std::string(key) + "' must be an integer or null");
    return v->get<std::int64_t>();
  }
  double number(std::initializer_list<const char*> keys, double def) const {
    std::string key;
    const json* v = find(keys, &key);
    if (!v) return def;
    if (!v->is_number()) fail("key '" + key + "' must be a number, got " + v->dump());
    return v->get<double>();
  }
  double probability(const char* key, double def) const {
    const double p = number({key}, def);
    if (p < 0.0 || p >= 1.0) fail("key '" + std::string(key) + "' must be in [0, 1)");
    return p;
  }
  bool boolean(const char* key, bool def) const {
    const json* v = find({key});
    if (!v) return def;
    if (!v->is_boolean()) fail("key '" + std::string(key) + "' must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    const json* v = find({key});
    if (!v) return def;
    if (!v->is_string()) fail("key '" + std::string(key) + "' must be a string, got " + v->dump());
    return v->get<std::string>();
  }
  const json& raw() const { return j_; }
  const std::string& origin() const { return origin_; }

 private:
  const json& j_;
  std::string origin_;
};

void read_rope(const reader& r, model_config& c) {
  double top_theta = r.number({"rope_theta"}, 10000.0);
  const json* params = r.find({"rope_parameters", "rope_scaling"});
  c.rope_theta = top_theta;
  if (!params) return;
  if (!params->is_object()) r.fail("key 'rope_parameters'/'rope_scaling' must be an object");
  reader p(*params, r.origin() + " (rope parameters)");
  c.rope_theta = p.number({"rope_theta"}, top_theta);
  c.scaling.type = p.string("rope_type", p.string("type", "default"));
  if (c.scaling.type == "default") return;
  if (c.scaling.type != "linear" && c.scaling.type != "llama3") {
    r.fail("rope type '" + c.scaling.type + "' is not supported (supported: default, linear, llama3)");
  }
  c.scaling.factor = p.number({"factor"}, 1.0);
  if (c.scaling.factor <= 0) r.fail("rope factor must be positive");
  if (c.scaling.type == "llama3") {
    c.scaling.low_freq_factor = p.number({"low_freq_factor"}, 1.0);
    c.scaling.high_freq_factor = p.number({"high_freq_factor"}, 4.0);
    c.scaling.original_max_positions = p.integer({"original_max_position_embeddings"}, std::nullopt);
    if (c.scaling.high_freq_factor <= c.scaling.low_freq_factor) {
      r.fail("llama3 rope: high_freq_factor must exceed low_freq_factor");
    }
  }
}

// Per-layer sliding windows from `layer_types` when present, else from `sliding` for layers at or
// beyond `first_sliding_layer`.
void read_sliding(const reader& r, model_config& c, std::optional<std::int64_t> window,
                  std::int64_t first_sliding_layer) {
  c.sliding_window.assign(static_cast<std::size_t>(c.num_layers), 0);
  if (!window) return;
  if (*window < 1) r.fail("key 'sliding_window' must be >= 1 or null");
  const json* types = r.find({"layer_types"});
  if (types) {
    if (!types->is_array() || static_cast<std::int64_t>(types->size()) != c.num_layers) {
      r.fail("key 'layer_types' must be a list with one entry per layer (" +
             std::to_string(c.num_layers) + ")");
    }
    for (std::size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      if (t == "sliding_attention") {
        c.sliding_window[i] = *window;
      } else if (t != "full_attention") {
        r.fail("layer_types[" + std::to_string(i) + "] must be \"full_attention\" or "
               "\"sliding_attention\", got " + t.dump());
      }
    }
    return;
  }
  for (std::int64_t i = first_sliding_layer; i < c.num_layers; ++i) c.sliding_window[i] = *window;
}

void read_llama_like(const reader& r, model_config& c) {
  c.hidden_size = r.integer({"hidden_size"}, std::nullopt);
  c.num_layers = r.integer({"num_hidden_layers"}, std::nullopt);
  c.num_heads = r.integer({"num_attention_heads"}, std::nullopt);
  c.num_kv_heads = r.integer({"num_key_value_heads"}, c.num_heads);
  c.head_dim = r.integer({"head_dim"}, c.hidden_size / c.num_heads);
  c.norm = norm_kind::rms_norm;
  c.norm_eps = r.number({"rms_norm_eps"}, 1e-6);
  c.activation = r.string("hidden_act", "silu");
  c.gated_mlp = true;
  c.rotary = rotary_style::half;
  c.rotary_dim = c.head_dim;
  read_rope(r, c);
  c.pad_token_id = r.optional_integer("pad_token_id");
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.sliding_window.assign(static_cast<std::size_t>(c.num_layers), 0);
  c.attention_dropout = r.probability("attention_dropout", 0.0);
}

void read_family(const reader& r, model_config& c) {
  switch (c.fam) {
    case family::gpt2:
    case family::gptj: {
      const bool j = c.fam == family::gptj;
      c.hidden_size = r.integer({"n_embd", "hidden_size"}, std::nullopt);
      c.num_layers = r.integer({"n_layer", "num_hidden_layers"}, std::nullopt);
      c.num_heads = r.integer({"n_head", "num_attention_heads"}, std::nullopt);
      c.num_kv_heads = c.num_heads;
      c.head_dim = c.hidden_size / c.num_heads;
      c.max_positions = r.integer({"n_positions", "max_position_embeddings"},
                                  j ? 2048 : 1024);
      c.intermediate_size = r.integer({"n_inner"}, 4 * c.hidden_size);
      c.activation = r.string("activation_function", "gelu_new");
      c.norm = norm_kind::layer_norm;
      c.norm_eps = r.number({"layer_norm_epsilon"}, 1e-5);
      c.tie_word_embeddings = r.boolean("tie_word_embeddings", !j);
      c.sliding_window.assign(static_cast<std::size_t>(c.num_layers), 0);
      c.embed_dropout = r.probability("embd_pdrop", j ? 0.0 : 0.1);
      c.attention_dropout = r.probability("attn_pdrop", j ? 0.0 : 0.1);
      c.residual_dropout = r.probability("resid_pdrop", j ? 0.0 : 0.1);
      if (j) {
        c.rotary = rotary_style::interleaved;
        c.rotary_dim = r.integer({"rotary_dim"}, c.head_dim);
        if (c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0) {
          r.fail("key 'rotary_dim' must be even and at most the head size " +
                 std::to_string(c.head_dim));
        }
        c.parallel_residual = true;
        c.mlp_bias = true;
        c.lm_head_bias = true;
      } else {
        c.learned_positions = true;
        c.conv1d = true;
        c.qkv_bias = c.o_bias = c.mlp_bias = true;
        c.scale_attn_weights = r.boolean("scale_attn_weights", true);
        c.scale_attn_by_inverse_layer_idx = r.boolean("scale_attn_by_inverse_layer_idx", false);
      }
      break;
    }
    case family::llama:
      read_llama_like(r, c);
      c.intermediate_size = r.integer({"intermediate_size"}, 11008);
      c.max_positions = r.integer({"max_position_embeddings"}, 2048);
      c.qkv_bias = c.o_bias = r.boolean("attention_bias", false);
      c.mlp_bias = r.boolean("mlp_bias", false);
      break;
    case family::mistral:
      read_llama_like(r, c);
      c.intermediate_size = r.integer({"intermediate_size"}, 14336);
      c.max_positions = r.integer({"max_position_embeddings"}, 4096 * 32);
      read_sliding(r, c, r.find({"sliding_window"}) ? r.optional_integer("sliding_window")
                                                    : std::optional<std::int64_t>(4096), 0);
      break;
    case family::qwen2: {
      read_llama_like(r, c);
      c.intermediate_size = r.integer({"intermediate_size"}, 22016);
      c.max_positions = r.integer({"max_position_embeddings"}, 32768);
      c.qkv_bias = true;
      const bool use_sliding = r.boolean("use_sliding_window", false);
      std::optional<std::int64_t> window;
      if (use_sliding) window = r.integer({"sliding_window"}, 4096);
      read_sliding(r, c, window, r.integer({"max_window_layers"}, 28, 0));
      break;
    }
    case family::opt:
      c.hidden_size = r.integer({"hidden_size"}, std::nullopt);
      c.num_layers = r.integer({"num_hidden_layers"}, std::nullopt);
      c.num_heads = r.integer({"num_attention_heads"}, std::nullopt);
      c.num_kv_heads = c.num_heads;
      c.head_dim = c.hidden_size / c.num_heads;
      c.intermediate_size = r.integer({"ffn_dim"}, 3072);
      c.max_positions = r.integer({"max_position_embeddings"}, 2048);
      c.learned_positions = true;
      c.position_offset = 2;
      c.activation = r.string("activation_function", "relu");
      c.norm = norm_kind::layer_norm;
      c.norm_eps = 1e-5;
      c.norm_affine = r.boolean("layer_norm_elementwise_affine", true);
      c.norm_before = r.boolean("do_layer_norm_before", true);
      c.final_norm = c.norm_before && !r.boolean("_remove_final_layer_norm", false);
      c.word_embed_proj_dim = r.integer({"word_embed_proj_dim"}, c.hidden_size);
      c.qkv_bias = c.o_bias = c.mlp_bias = r.boolean("enable_bias", true);
      c.pad_token_id = r.find({"pad_token_id"}) ? r.optional_integer("pad_token_id")
                                                : std::optional<std::int64_t>(1);
      c.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
      c.sliding_window.assign(static_cast<std::size_t>(c.num_layers), 0);
      c.embed_dropout = c.residual_dropout = r.probability("dropout", 0.1);
      c.attention_dropout = r.probability("attention_dropout", 0.0);
      c.activation_dropout = r.probability("activation_dropout", 0.0);
      break;
  }
}

// A …ForSequenceClassification config.json (its architectures say so): num_labels (else
// id2label's size, else 1) and, in every family, pad_token_id.
void read_classifier(const reader& r, const json& j, model_config& c) {
  const auto arch = j.find("architectures");
  if (arch == j.end() || !arch->is_array() || arch->empty() || !arch->front().is_string()) return;
  const std::string name = arch->front().get<std::string>();
  const std::string suffix = "ForSequenceClassification";
  if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return;
  const auto labels = j.find("id2label");
  const std::int64_t counted = labels != j.end() && labels->is_object() && !labels->empty()
                                   ? static_cast<std::int64_t>(labels->size())
                                   : 1;
  c.num_labels = r.integer({"num_labels"}, counted);
  if (!c.pad_token_id) c.pad_token_id = r.optional_integer("pad_token_id");
}

void validate(const reader& r, const model_config& c) {
  if (c.hidden_size % c.num_heads != 0 && c.rotary != rotary_style::half) {
    r.fail("hidden size " + std::to_string(c.hidden_size) + " is not divisible by the " +
           std::to_string(c.num_heads) + " attention heads");
  }
  if (c.num_kv_heads < 1 || c.num_heads % c.num_kv_heads != 0) {
    r.fail("num_attention_heads (" + std::to_string(c.num_heads) +
           ") must be a multiple of num_key_value_heads (" + std::to_string(c.num_kv_heads) + ")");
  }
  if (c.rotary == rotary_style::half && c.head_dim % 2 != 0) r.fail("head_dim must be even for rotary");
  if (c.pad_token_id && (*c.pad_token_id < 0 || *c.pad_token_id >= c.vocab_size)) {
    r.fail("pad_token_id " + std::to_string(*c.pad_token_id) + " is outside the vocabulary");
  }
  static const char* const acts[] = {"gelu_new", "gelu", "gelu_pytorch_tanh", "gelu_fast",
                                     "quick_gelu", "relu", "silu", "swish"};
  for (const char* a : acts) {
    if (c.activation == a) return;
  }
  r.fail("activation '" + c.activation +
         "' is not supported (supported: gelu_new, gelu, gelu_pytorch_tanh, gelu_fast, "
         "quick_gelu, relu, silu, swish)");
}

// dtype (or transformers 4's torch_dtype): float32 when absent.
std::string read_dtype(const reader& r) {
  std::string key;
  const json* d = r.find({"dtype", "torch_dtype"}, &key);
  if (!d) return "float32";
  if (!d->is_string()) r.fail("key '" + key + "' must be a string");
  const std::string dtype = d->get<std::string>();
  if (dtype != "float32" && dtype != "float16" && dtype != "bfloat16") {
    r.fail("key '" + key + "' is '" + dtype + "'; supported: float32, float16, bfloat16");
  }
  return dtype;
}

// Writes `dtype` under the key the source used (transformers 4's torch_dtype or 5's dtype).
void write_dtype(json& j, const std::string& dtype) {
  if (j.contains("torch_dtype") && !j.contains("dtype")) {
    j["torch_dtype"] = dtype;
  } else {
    j["dtype"] = dtype;
  }
}

}  // namespace

const char* family_name(family f) {
  switch (f) {
    case family::gpt2: return "gpt2";
    case family::llama: return "llama";
    case family::mistral: return "mistral";
    case family::qwen2: return "qwen2";
    case family::opt: return "opt";
    case family::gptj: return "gptj";
  }
  return "?";
}

const char* architecture_name(family f) {
  switch (f) {
    case family::gpt2: return "GPT2LMHeadModel";
    case family::llama: return "LlamaForCausalLM";
    case family::mistral: return "MistralForCausalLM";
    case family::qwen2: return "Qwen2ForCausalLM";
    case family::opt: return "OPTForCausalLM";
    case family::gptj: return "GPTJForCausalLM";
  }
  return "?";
}

const char* classifier_architecture_name(family f) {
  switch (f) {
    case family::gpt2:
      return "GPT2ForSequenceClassification";
    case family::llama:
      return "LlamaForSequenceClassification";
    case family::mistral:
      return "MistralForSequenceClassification";
    case family::qwen2:
      return "Qwen2ForSequenceClassification";
    case family::opt:
      return "OPTForSequenceClassification";
    case family::gptj:
      return "GPTJForSequenceClassification";
  }
  return "?";
}

bool has_embedding_padding_idx(family f) { return f != family::gpt2 && f != family::gptj; }

model_config parse_config(const json& j, const std::string& origin) {
  if (!j.is_object()) throw model_error(model_errc::bad_config, origin + ": not a JSON object");
  reader r(j, origin);
  const json* type = r.find({"model_type"});
  if (!type) r.fail("missing required key 'model_type' (one of gpt2, llama, mistral, qwen2, opt, gptj)");
  if (!type->is_string()) r.fail("key 'model_type' must be a string, got " + type->dump());
  model_config c;
  const std::string t = type->get<std::string>();
  if (t == "t5") {
    r.fail("model_type 't5' is an encoder-decoder, not a causal decoder: cohort-model eval, step "
           "and info take it; the training engine takes gpt2, llama, mistral, qwen2, opt, gptj");
  }
  bool known = false;
  for (family f : {family::gpt2, family::llama, family::mistral, family::qwen2, family::opt,
                   family::gptj}) {
    if (t == family_name(f)) {
      c.fam = f;
      known = true;
    }
  }
  if (!known) {
    r.fail("unknown model_type '" + t + "' (supported: gpt2, llama, mistral, qwen2, opt, gptj)");
  }
  c.vocab_size = r.integer({"vocab_size"}, std::nullopt);
  read_family(r, c);
  c.initializer_range = r.number({"initializer_range", "init_std"}, 0.02);
  c.dtype = read_dtype(r);
  read_classifier(r, j, c);
  validate(r, c);
  c.source = j;
  return c;
}

json read_config_json(const std::string& path, std::string* file_read) {
  const std::string file =
      std::filesystem::is_directory(path) ? path + "/config.json" : path;
  if (file_read) *file_read = file;
  std::ifstream in(file);
  if (!in) {
    throw model_error(model_errc::bad_config, file + ": cannot open (expected a Hugging Face "
                                                     "config.json or a directory holding one)");
  }
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, false);
  if (j.is_discarded()) throw model_error(model_errc::bad_config, file + ": not valid JSON");
  return j;
}

bool is_t5(const json& config) {
  const auto it = config.find("model_type");
  return config.is_object() && it != config.end() && *it == "t5";
}

model_config read_config(const std::string& path) {
  std::string file;
  const json j = read_config_json(path, &file);
  return parse_config(j, file);
}

t5_config parse_t5_config(const json& j, const std::string& origin) {
  if (!j.is_object()) throw model_error(model_errc::bad_config, origin + ": not a JSON object");
  reader r(j, origin);
  if (!is_t5(j)) r.fail("key 'model_type' must be \"t5\" for a T5 config");
  t5_config c;
  c.vocab_size = r.integer({"vocab_size"}, 32128);
  c.d_model = r.integer({"d_model"}, 512);
  c.d_kv = r.integer({"d_kv"}, 64);
  c.d_ff = r.integer({"d_ff"}, 2048);
  c.num_layers = r.integer({"num_layers"}, 6);
  c.num_decoder_layers = r.integer({"num_decoder_layers"}, c.num_layers);
  c.num_heads = r.integer({"num_heads"}, 8);
  c.relative_attention_num_buckets = r.integer({"relative_attention_num_buckets"}, 32, 4);
  c.relative_attention_max_distance = r.integer({"relative_attention_max_distance"}, 128);
  if (c.relative_attention_max_distance <= c.relative_attention_num_buckets / 2) {
    // The log-spaced buckets run from max_exact (buckets / 2 in the decoder) to max_distance.
    r.fail("key 'relative_attention_max_distance' must exceed relative_attention_num_buckets / 2 (" +
           std::to_string(c.relative_attention_num_buckets / 2) + ")");
  }
  c.feed_forward_proj = r.string("feed_forward_proj", "relu");
  const std::string& f = c.feed_forward_proj;
  c.gated = f.rfind("gated-", 0) == 0;
  const std::string act = c.gated ? f.substr(6) : f;
  if (act == "relu" || act == "silu" || act == "gelu") {
    c.activation = act == "gelu" && c.gated ? "gelu_new" : act;  // T5Config: gated-gelu is gelu_new
  } else {
    r.fail("key 'feed_forward_proj' is '" + f + "'; supported: relu, gated-gelu, gated-silu, "
           "gated-relu, gelu, silu");
  }
  c.layer_norm_epsilon = r.number({"layer_norm_epsilon"}, 1e-6);
  if (c.layer_norm_epsilon <= 0) r.fail("key 'layer_norm_epsilon' must be > 0");
  c.dropout_rate = r.probability("dropout_rate", 0.1);
  c.initializer_factor = r.number({"initializer_factor"}, 1.0);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
  c.scale_decoder_outputs = r.boolean("scale_decoder_outputs", c.tie_word_embeddings);
  c.pad_token_id = r.integer({"pad_token_id"}, 0, 0);
  c.decoder_start_token_id = r.integer({"decoder_start_token_id"}, c.pad_token_id, 0);
  for (const auto& [key, id] : {std::pair<const char*, std::int64_t>{"pad_token_id", c.pad_token_id},
                                {"decoder_start_token_id", c.decoder_start_token_id}}) {
    if (id >= c.vocab_size) {
      r.fail("key '" + std::string(key) + "' is " + std::to_string(id) +
             ", outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
  }
  if (r.boolean("is_decoder", false)) r.fail("key 'is_decoder' is true; only the encoder-decoder T5 is supported");
  c.dtype = read_dtype(r);
  c.source = j;
  return c;
}

t5_config read_t5_config(const std::string& path) {
  std::string file;
  const json j = read_config_json(path, &file);
  return parse_t5_config(j, file);
}

json to_hf_json(const t5_config& c) {
  json j = c.source.is_object() ? c.source : json::object();
  j["model_type"] = "t5";
  j["architectures"] = json::array({"T5ForConditionalGeneration"});
  j["is_encoder_decoder"] = true;
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["d_kv"] = c.d_kv;
  j["d_ff"] = c.d_ff;
  j["num_layers"] = c.num_layers;
  j["num_decoder_layers"] = c.num_decoder_layers;
  j["num_heads"] = c.num_heads;
  j["relative_attention_num_buckets"] = c.relative_attention_num_buckets;
  j["relative_attention_max_distance"] = c.relative_attention_max_distance;
  j["feed_forward_proj"] = c.feed_forward_proj;
  j["dense_act_fn"] = c.activation;
  j["is_gated_act"] = c.gated;
  j["layer_norm_epsilon"] = c.layer_norm_epsilon;
  j["dropout_rate"] = c.dropout_rate;
  j["initializer_factor"] = c.initializer_factor;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["scale_decoder_outputs"] = c.scale_decoder_outputs;
  j["decoder_start_token_id"] = c.decoder_start_token_id;
  j["pad_token_id"] = c.pad_token_id;
  write_dtype(j, c.dtype);
  return j;
}

namespace {

// pad_token_id, null where the model has none.
void write_pad(json& j, const model_config& c) {
  j["pad_token_id"] = c.pad_token_id ? json(*c.pad_token_id) : json(nullptr);
}

// A sequence classifier's keys as transformers writes them (PretrainedConfig's id2label and
// label2id), num_labels, and the pad_token_id its score is read by.
void write_classifier(json& j, const model_config& c) {
  json id2label = json::object(), label2id = json::object();
  for (std::int64_t i = 0; i < c.num_labels; ++i) {
    const std::string label = "LABEL_" + std::to_string(i);
    id2label[std::to_string(i)] = label;
    label2id[label] = i;
  }
  j["id2label"] = id2label;
  j["label2id"] = label2id;
  j["num_labels"] = c.num_labels;
  write_pad(j, c);
}

// Rotary's base and scaling, in rope_parameters where the source keeps them there (newer
// transformers), else as rope_theta and rope_scaling.
void write_rope(json& j, const model_config& c) {
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    j["rope_parameters"]["rope_theta"] = c.rope_theta;
    j["rope_parameters"]["rope_type"] = c.scaling.type;
  } else {
    j["rope_theta"] = c.rope_theta;
  }
  if (c.scaling.type == "default") return;
  json s = {{"rope_type", c.scaling.type}, {"factor", c.scaling.factor}};
  if (c.scaling.type == "llama3") {
    s["low_freq_factor"] = c.scaling.low_freq_factor;
    s["high_freq_factor"] = c.scaling.high_freq_factor;
    s["original_max_position_embeddings"] = c.scaling.original_max_positions;
  }
  if (j.contains("rope_parameters")) {
    j["rope_parameters"].update(s);
  } else {
    j["rope_scaling"] = s;
  }
}

// GPT-2's and GPT-J's names.
void write_gpt2_shape(json& j, const model_config& c) {
  j["n_embd"] = c.hidden_size;
  j["n_layer"] = c.num_layers;
  j["n_head"] = c.num_heads;
  j["n_positions"] = c.max_positions;
  // null means 4 * n_embd; keep it null where the source had it so.
  j["n_inner"] =
      c.intermediate_size == 4 * c.hidden_size && (!j.contains("n_inner") || j["n_inner"].is_null())
          ? json(nullptr)
          : json(c.intermediate_size);
  j["activation_function"] = c.activation;
  j["layer_norm_epsilon"] = c.norm_eps;
  j["embd_pdrop"] = c.embed_dropout;
  j["attn_pdrop"] = c.attention_dropout;
  j["resid_pdrop"] = c.residual_dropout;
  if (c.fam == family::gptj) {
    j["rotary_dim"] = c.rotary_dim;
  } else {
    j["scale_attn_weights"] = c.scale_attn_weights;
    j["scale_attn_by_inverse_layer_idx"] = c.scale_attn_by_inverse_layer_idx;
  }
}

// Mistral's and Qwen2's sliding windows: the window, which layers have one, and Qwen2's first.
void write_sliding_window(json& j, const model_config& c) {
  std::int64_t window = 0;
  for (std::int64_t w : c.sliding_window) window = std::max(window, w);
  j["sliding_window"] = window > 0 ? json(window) : json(nullptr);
  if (c.fam == family::qwen2) j["use_sliding_window"] = window > 0;
  if (window > 0 || j.contains("layer_types")) {
    json types = json::array();
    for (std::int64_t w : c.sliding_window) {
      types.push_back(w > 0 ? "sliding_attention" : "full_attention");
    }
    j["layer_types"] = types;
  }
  if (c.fam == family::qwen2 && window > 0) {
    std::int64_t first = c.num_layers;
    for (std::int64_t i = c.num_layers - 1; i >= 0 && c.sliding_window[i] > 0; --i) first = i;
    j["max_window_layers"] = first;
  }
}

// Llama's, Mistral's and Qwen2's names.
void write_llama_shape(json& j, const model_config& c) {
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = c.activation;
  j["max_position_embeddings"] = c.max_positions;
  j["rms_norm_eps"] = c.norm_eps;
  write_rope(j, c);
  write_pad(j, c);
  j["attention_dropout"] = c.attention_dropout;
  if (c.fam == family::llama) {
    j["attention_bias"] = c.qkv_bias;
    j["mlp_bias"] = c.mlp_bias;
  } else {
    write_sliding_window(j, c);
  }
}

void write_opt_shape(json& j, const model_config& c) {
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["ffn_dim"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_positions;
  j["activation_function"] = c.activation;
  j["do_layer_norm_before"] = c.norm_before;
  j["_remove_final_layer_norm"] = c.norm_before && !c.final_norm;
  j["word_embed_proj_dim"] = c.word_embed_proj_dim;
  j["enable_bias"] = c.qkv_bias;
  j["layer_norm_elementwise_affine"] = c.norm_affine;
  j["dropout"] = c.residual_dropout;
  j["attention_dropout"] = c.attention_dropout;
  j["activation_dropout"] = c.activation_dropout;
  write_pad(j, c);
}

}  // namespace

json to_hf_json(const model_config& c) {
  json j = c.source.is_object() ? c.source : json::object();
  j["model_type"] = family_name(c.fam);
  j["architectures"] =
      json::array({c.num_labels > 0 ? classifier_architecture_name(c.fam) : architecture_name(c.fam)});
  j["vocab_size"] = c.vocab_size;
  if (c.num_labels > 0) write_classifier(j, c);
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  write_dtype(j, c.dtype);
  switch (c.fam) {
    case family::gpt2:
    case family::gptj:
      write_gpt2_shape(j, c);
      break;
    case family::llama:
    case family::mistral:
    case family::qwen2:
      write_llama_shape(j, c);
      break;
    case family::opt:
      write_opt_shape(j, c);
      break;
  }
  return j;
}

}  // namespace cohort::core::model

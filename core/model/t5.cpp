// T5's modules, as transformers' modeling_t5.py (T5Attention, T5Block, T5Stack,
// T5ForConditionalGeneration) computes them, and its Hugging Face directory I/O.
#include "core/model/t5.hpp"

#include <cmath>
#include <limits>

#include <torch/utils.h>

#include "core/model/model_error.hpp"

namespace cohort::core::model {
namespace {

constexpr double minus_inf = -std::numeric_limits<double>::infinity();

// The decoder's norm and feed-forward modules read these fields: T5LayerNorm is RMSNorm with a
// weight (fp32 variance, no mean, no bias); DenseReluDense is the MLP with wi (or wi_0, wi_1) and
// wo, no biases, dropout after the activation and on the output.
model_config layer_config(const t5_config& c) {
  model_config m;
  m.hidden_size = c.d_model;
  m.intermediate_size = c.d_ff;
  m.norm = norm_kind::rms_norm;
  m.norm_eps = c.layer_norm_epsilon;
  m.norm_affine = true;
  m.activation = c.activation;
  m.gated_mlp = c.gated;
  m.activation_dropout = c.dropout_rate;
  m.residual_dropout = c.dropout_rate;
  return m;
}

torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training) {
  return torch::dropout(x, p, training && p > 0.0);
}

}  // namespace

torch::Tensor t5_relative_position_bucket(const torch::Tensor& relative_position, bool bidirectional,
                                          std::int64_t num_buckets, std::int64_t max_distance) {
  auto buckets = torch::zeros_like(relative_position);
  torch::Tensor distance;
  if (bidirectional) {
    num_buckets /= 2;
    buckets = buckets + relative_position.gt(0).to(torch::kInt64) * num_buckets;
    distance = relative_position.abs();
  } else {
    distance = -torch::min(relative_position, torch::zeros_like(relative_position));
  }
  const std::int64_t max_exact = num_buckets / 2;
  const auto is_small = distance.lt(max_exact);
  // fp32 as transformers computes it; truncated towards zero by the conversion.
  auto large = max_exact + (torch::log(distance.to(torch::kFloat) / static_cast<double>(max_exact)) /
                            std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                            static_cast<double>(num_buckets - max_exact))
                               .to(torch::kInt64);
  large = torch::min(large, torch::full_like(large, num_buckets - 1));
  return buckets + torch::where(is_small, distance, large);
}

t5_attention_impl::t5_attention_impl(const t5_config& c, bool relative_bias,
                                     const torch::TensorOptions& options)
    : heads_(c.num_heads),
      d_kv_(c.d_kv),
      num_buckets_(c.relative_attention_num_buckets),
      max_distance_(c.relative_attention_max_distance),
      dropout_(c.dropout_rate) {
  const std::int64_t inner = c.num_heads * c.d_kv;
  q = register_module("q", projection(c.d_model, inner, false, false, options));
  k = register_module("k", projection(c.d_model, inner, false, false, options));
  v = register_module("v", projection(c.d_model, inner, false, false, options));
  o = register_module("o", projection(inner, c.d_model, false, false, options));
  if (relative_bias) {
    relative_attention_bias = register_parameter(
        "relative_attention_bias", torch::empty({c.relative_attention_num_buckets, c.num_heads}, options));
  }
}

torch::Tensor t5_attention_impl::position_bias(std::int64_t T, std::int64_t S, bool bidirectional) const {
  const auto longs = relative_attention_bias.options().dtype(torch::kInt64);
  const auto query = torch::arange(T, longs).view({T, 1});
  const auto key = torch::arange(S, longs).view({1, S});
  const auto buckets =
      t5_relative_position_bucket(key - query, bidirectional, num_buckets_, max_distance_);  // (T, S)
  return torch::embedding(relative_attention_bias, buckets).permute({2, 0, 1}).unsqueeze(0);  // (1, H, T, S)
}

torch::Tensor t5_attention_impl::forward(const torch::Tensor& x, const torch::Tensor& memory,
                                         const torch::Tensor& bias) {
  const std::int64_t B = x.size(0), T = x.size(1), S = memory.size(1);
  const auto qs = q->forward(x).view({B, T, heads_, d_kv_}).transpose(1, 2);  // (B, H, T, D)
  const auto ks = k->forward(memory).view({B, S, heads_, d_kv_}).transpose(1, 2);  // (B, H, S, D)
  const auto vs = v->forward(memory).view({B, S, heads_, d_kv_}).transpose(1, 2);
  auto scores = torch::matmul(qs, ks.transpose(-2, -1));  // (B, H, T, S); T5 does not scale
  if (bias.defined()) scores = scores + bias.to(scores.scalar_type());
  auto w = torch::softmax(scores.to(torch::kFloat), -1).to(scores.scalar_type());
  w = maybe_dropout(w, dropout_, is_training());
  const auto y = torch::matmul(w, vs).transpose(1, 2).reshape({B, T, heads_ * d_kv_});
  return o->forward(y);
}

t5_block_impl::t5_block_impl(const t5_config& c, bool decoder, bool relative_bias,
                             const torch::TensorOptions& options)
    : dropout_(c.dropout_rate) {
  const model_config m = layer_config(c);
  self_norm = register_module("self_norm", norm(m, options));
  self_attn = register_module("self_attn", t5_attention(c, relative_bias, options));
  if (decoder) {
    cross_norm = register_module("cross_norm", norm(m, options));
    cross_attn = register_module("cross_attn", t5_attention(c, false, options));
  }
  ffn_norm = register_module("ffn_norm", norm(m, options));
  ffn = register_module("ffn", mlp(m, options));
}

torch::Tensor t5_block_impl::forward(const torch::Tensor& x, const torch::Tensor& self_bias,
                                     const torch::Tensor& memory, const torch::Tensor& cross_bias) {
  const bool train = is_training();
  auto normed = self_norm->forward(x);
  auto h = x + maybe_dropout(self_attn->forward(normed, normed, self_bias), dropout_, train);
  if (cross_attn) {
    h = h + maybe_dropout(cross_attn->forward(cross_norm->forward(h), memory, cross_bias), dropout_, train);
  }
  return h + ffn->forward(ffn_norm->forward(h));  // the MLP applies its output dropout itself
}

t5_model_impl::t5_model_impl(t5_config c, const torch::TensorOptions& options) : config_(std::move(c)) {
  const auto& cfg = config_;
  const auto list = [&](const std::string& name, const torch::Tensor& t, std::int64_t layer) {
    hf_params_.push_back({name, t, layer});
  };
  shared_ = register_parameter("shared", torch::empty({cfg.vocab_size, cfg.d_model}, options));
  list("shared.weight", shared_, -1);
  const auto add_stack = [&](const std::string& stack, std::int64_t blocks, bool decoder,
                             std::vector<t5_block>& out, norm& final_norm, std::int64_t first_layer) {
    for (std::int64_t i = 0; i < blocks; ++i) {
      auto block = register_module(stack + std::to_string(i), t5_block(cfg, decoder, i == 0, options));
      out.push_back(block);
      const std::int64_t layer = first_layer + i;
      const std::string prefix = stack + ".block." + std::to_string(i) + ".layer.";
      const auto add_attention = [&](const t5_attention& a, const std::string& name) {
        for (const auto& [part, p] : {std::pair<const char*, projection>{"q", a->q}, {"k", a->k},
                                      {"v", a->v}, {"o", a->o}}) {
          list(name + "." + part + ".weight", p->weight, layer);
        }
        if (a->relative_attention_bias.defined()) {  // every block of the stack uses it
          list(name + ".relative_attention_bias.weight", a->relative_attention_bias, -1);
        }
      };
      add_attention(block->self_attn, prefix + "0.SelfAttention");
      list(prefix + "0.layer_norm.weight", block->self_norm->weight, layer);
      std::int64_t k = 1;
      if (decoder) {
        add_attention(block->cross_attn, prefix + "1.EncDecAttention");
        list(prefix + "1.layer_norm.weight", block->cross_norm->weight, layer);
        k = 2;
      }
      const std::string ff = prefix + std::to_string(k) + ".DenseReluDense.";
      if (cfg.gated) {
        list(ff + "wi_0.weight", block->ffn->gate->weight, layer);
        list(ff + "wi_1.weight", block->ffn->up->weight, layer);
      } else {
        list(ff + "wi.weight", block->ffn->up->weight, layer);
      }
      list(ff + "wo.weight", block->ffn->down->weight, layer);
      list(prefix + std::to_string(k) + ".layer_norm.weight", block->ffn_norm->weight, layer);
    }
    final_norm = register_module(stack + "_final_norm", norm(layer_config(cfg), options));
    list(stack + ".final_layer_norm.weight", final_norm->weight, -1);
  };
  add_stack("encoder", cfg.num_layers, false, encoder_, encoder_norm_, 0);
  add_stack("decoder", cfg.num_decoder_layers, true, decoder_, decoder_norm_, cfg.num_layers);
  if (cfg.tie_word_embeddings) {
    lm_head_ = shared_;
  } else {
    lm_head_ = register_parameter("lm_head", torch::empty({cfg.vocab_size, cfg.d_model}, options));
    list("lm_head.weight", lm_head_, -1);
  }
}

std::int64_t t5_model_impl::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& p : hf_params_) n += p.tensor.numel();
  return n;
}

torch::Tensor t5_model_impl::embed(const torch::Tensor& ids) {
  return maybe_dropout(torch::embedding(shared_, ids), config_.dropout_rate, is_training());
}

torch::Tensor t5_model_impl::mask_bias(const torch::Tensor& attention_mask,
                                       const torch::TensorOptions& options) const {
  if (!attention_mask.defined()) return {};
  const std::int64_t B = attention_mask.size(0), T = attention_mask.size(1);
  return torch::zeros({B, 1, 1, T}, options)
      .masked_fill(attention_mask.eq(0).view({B, 1, 1, T}).to(options.device()), minus_inf);
}

torch::Tensor t5_model_impl::encoder_bias(std::int64_t T, const torch::Tensor& attention_mask) const {
  auto bias = encoder_.front()->self_attn->position_bias(T, T, true);  // (1, H, T, T)
  if (attention_mask.defined()) bias = bias + mask_bias(attention_mask, bias.options());  // (B, H, T, T)
  return bias;
}

torch::Tensor t5_model_impl::decoder_self_bias(std::int64_t S) const {
  const auto bias = decoder_.front()->self_attn->position_bias(S, S, false);  // (1, H, S, S)
  const auto future = torch::ones({S, S}, bias.options().dtype(torch::kBool)).triu(1);
  return bias.masked_fill(future, minus_inf);
}

torch::Tensor t5_model_impl::encoder_final(const torch::Tensor& x) {
  return maybe_dropout(encoder_norm_->forward(x), config_.dropout_rate, is_training());
}

torch::Tensor t5_model_impl::decoder_final(const torch::Tensor& y) {
  return maybe_dropout(decoder_norm_->forward(y), config_.dropout_rate, is_training());
}

torch::Tensor t5_model_impl::encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  check_token_ids(input_ids, "input_ids", config_.vocab_size, false);
  if (attention_mask.defined() && attention_mask.sizes() != input_ids.sizes()) {
    throw model_error(model_errc::bad_input, "attention_mask must have the shape of input_ids");
  }
  auto x = embed(input_ids);  // (B, T, C)
  const auto bias = encoder_bias(input_ids.size(1), attention_mask);
  for (auto& block : encoder_) x = block->forward(x, bias, {}, {});
  return encoder_final(x);
}

torch::Tensor t5_model_impl::decode(const torch::Tensor& decoder_input_ids,
                                    const torch::Tensor& encoder_hidden,
                                    const torch::Tensor& attention_mask) {
  check_token_ids(decoder_input_ids, "decoder_input_ids", config_.vocab_size, false);
  if (decoder_input_ids.size(0) != encoder_hidden.size(0)) {
    throw model_error(model_errc::bad_input, "decoder_input_ids (labels) must have as many rows as input_ids");
  }
  auto y = embed(decoder_input_ids);  // (B, S, C)
  const auto self_bias = decoder_self_bias(decoder_input_ids.size(1));
  const auto cross_bias = mask_bias(attention_mask, self_bias.options());  // (B, 1, 1, T)
  for (auto& block : decoder_) y = block->forward(y, self_bias, encoder_hidden, cross_bias);
  return decoder_final(y);
}

torch::Tensor t5_model_impl::head(const torch::Tensor& hidden) {
  const auto x = config_.scale_decoder_outputs
                     ? hidden * std::pow(static_cast<double>(config_.d_model), -0.5)
                     : hidden;
  return torch::linear(x, lm_head_);
}

torch::Tensor t5_model_impl::shift_right(const torch::Tensor& labels) const {
  const std::int64_t B = labels.size(0), S = labels.size(1);
  auto shifted = torch::cat({torch::full({B, 1}, config_.decoder_start_token_id, labels.options()),
                             labels.slice(1, 0, S - 1)},
                            1);
  return shifted.masked_fill(shifted.eq(-100), config_.pad_token_id);
}

t5_output t5_model_impl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                 const torch::Tensor& labels, const torch::Tensor& decoder_input_ids) {
  if (labels.defined()) check_token_ids(labels, "labels", config_.vocab_size, true);
  if (!labels.defined() && !decoder_input_ids.defined()) {
    throw model_error(model_errc::bad_input, "a T5 forward needs labels or decoder_input_ids");
  }
  const auto dec_ids = decoder_input_ids.defined() ? decoder_input_ids : shift_right(labels);
  if (labels.defined() && labels.sizes() != dec_ids.sizes()) {
    throw model_error(model_errc::bad_input, "labels must have the shape of decoder_input_ids");
  }
  t5_output out;
  out.encoder_hidden = encode(input_ids, attention_mask);
  out.logits = head(decode(dec_ids, out.encoder_hidden, attention_mask));  // (B, S, V)
  if (labels.defined()) {
    const std::int64_t V = out.logits.size(-1);
    out.loss = at::cross_entropy_loss(out.logits.to(torch::kFloat).reshape({-1, V}),
                                      labels.reshape({-1}), {}, at::Reduction::Mean, -100);
  }
  return out;
}

t5_model load_t5_model(const std::string& dir, const load_options& options) {
  t5_config cfg = read_t5_config(dir);
  const torch::ScalarType dtype = options.dtype ? *options.dtype : dtype_from_name(cfg.dtype);
  cfg.dtype = config_dtype_name(dtype);
  t5_model model(cfg, torch::TensorOptions().dtype(dtype).device(options.device));
  load_hf_weights(model->hf_parameters(), dir, "a t5 model with this config.json");
  model->eval();  // as from_pretrained returns it
  return model;
}

void save_t5_model(const t5_model_impl& model, const std::string& dir, const save_options& options) {
  const torch::ScalarType dtype = save_dtype(model.hf_parameters(), options);
  t5_config cfg = model.config();
  cfg.dtype = config_dtype_name(dtype);
  save_hf_files(model.hf_parameters(), to_hf_json(cfg), dtype, dir, options);
}

}  // namespace cohort::core::model

// The configurable causal decoder (GPT-2, Llama, Mistral, Qwen2, OPT, GPT-J) as torch::nn
// modules, computing what transformers' modeling code computes. Every weight is kept in its Hugging
// Face layout and listed under its Hugging Face name, so loading, saving and sharding map 1:1.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "core/model/model_config.hpp"

namespace cohort::core::model {

// One weight under its Hugging Face name; layer is its decoder layer or -1 (embeddings, head).
struct hf_parameter {
  std::string name;
  torch::Tensor tensor;
  std::int64_t layer = -1;
};

// Built once per sequence length and device, shared by every layer of a forward pass.
struct attention_context {
  torch::Tensor cos;  // (T, rotary_dim) fp32, undefined without rotary positions
  torch::Tensor sin;  // (T, rotary_dim)
  std::vector<std::pair<std::int64_t, torch::Tensor>> masks;  // window -> (T, T) bool; 0 = causal
  const torch::Tensor& mask(std::int64_t window) const;
};

// A linear map with its weight stored as Hugging Face stores it: (out, in) for nn.Linear,
// (in, out) for GPT-2's Conv1D.
class projection_impl : public torch::nn::Module {
 public:
  projection_impl(std::int64_t in, std::int64_t out, bool bias, bool conv1d,
                  const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (..., in) -> (..., out)
  torch::Tensor weight, bias;
  bool conv1d;
};
TORCH_MODULE_IMPL(projection, projection_impl);

// LayerNorm or RMSNorm (RMSNorm normalises in fp32, as transformers does).
class norm_impl : public torch::nn::Module {
 public:
  norm_impl(const model_config& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C)
  torch::Tensor weight, bias;  // undefined when not affine / RMSNorm has no bias
  norm_kind kind;
  double eps;
};
TORCH_MODULE_IMPL(norm, norm_impl);

class attention_impl : public torch::nn::Module {
 public:
  attention_impl(const model_config& config, std::int64_t layer, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const attention_context& ctx);  // (B, T, C)
  projection qkv{nullptr};  // fused (GPT-2), else q, k, v
  projection q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  // With separate q, k, v: one GEMM for the three, through their weights (and biases)
  // concatenated for the forward; the parameters, their Hugging Face names, checkpoints and
  // exports stay as they are (the backward splits the gradient back). false: three GEMMs.
  bool fuse_qkv = true;

 private:
  std::int64_t heads_, kv_heads_, head_dim_, rotary_dim_, window_;
  rotary_style rotary_;
  double scale_, attn_dropout_, resid_dropout_;
  bool fp32_scores_;  // GPT-J computes attention in fp32 whatever the weights' dtype
};
TORCH_MODULE_IMPL(attention, attention_impl);

class mlp_impl : public torch::nn::Module {
 public:
  mlp_impl(const model_config& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C)
  projection gate{nullptr}, up{nullptr}, down{nullptr};

 private:
  std::string activation_;
  double act_dropout_, resid_dropout_;
};
TORCH_MODULE_IMPL(mlp, mlp_impl);

// One decoder block. The engine may call layers one by one (activation checkpointing, ZeRO-3
// gathering of one layer's weights at a time).
class decoder_layer_impl : public torch::nn::Module {
 public:
  decoder_layer_impl(const model_config& config, std::int64_t layer,
                     const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const attention_context& ctx);  // (B, T, C)
  norm norm1{nullptr}, norm2{nullptr};  // norm2 absent with a parallel residual
  attention attn{nullptr};
  mlp ffn{nullptr};

 private:
  bool parallel_residual_, norm_before_;
};
TORCH_MODULE_IMPL(decoder_layer, decoder_layer_impl);

struct decoder_output {
  torch::Tensor logits;  // (B, T, V) in the model's dtype
  torch::Tensor loss;    // scalar fp32; undefined without labels
};

class decoder_impl : public torch::nn::Module {
 public:
  // `options` gives dtype and device (kMeta builds shapes only). With `initialize`, weights are
  // drawn as transformers' _init_weights does (normal(0, initializer_range), norms 1, biases 0)
  // from torch's global generator; otherwise they are left uninitialised for a load. Like any
  // torch module it starts in training mode, where the config's dropout applies; eval() stops it.
  explicit decoder_impl(model_config config, const torch::TensorOptions& options = {},
                        bool initialize = true);

  // input_ids (B, T) int64; labels (B, T) int64 with -100 = ignored, or undefined.
  decoder_output forward(const torch::Tensor& input_ids, const torch::Tensor& labels = {});

  // The pieces of forward(), for an engine that drives the layers itself.
  torch::Tensor embed(const torch::Tensor& input_ids);  // (B, T) -> (B, T, C)
  attention_context context(std::int64_t seq_len, const torch::Device& device) const;
  torch::Tensor head(const torch::Tensor& hidden);  // (B, T, C) -> (B, T, V)
  const std::vector<decoder_layer>& layers() const { return layers_; }

  // Every weight once (a tied lm_head is not listed), in a fixed order: embeddings, layers in
  // order, final norm, output projection, lm_head.
  const std::vector<hf_parameter>& hf_parameters() const { return hf_params_; }
  // Throws model_error (bad_weights) for a name the model does not have.
  const torch::Tensor& hf_tensor(const std::string& name) const;
  std::int64_t parameter_count() const;
  const model_config& config() const { return config_; }

 private:
  void check_ids(const torch::Tensor& ids, const char* what, bool allow_ignore) const;
  void list(const std::string& name, const torch::Tensor& t, std::int64_t layer);

  model_config config_;
  torch::Tensor embed_tokens_, embed_positions_, lm_head_weight_, lm_head_bias_;
  projection project_in_{nullptr}, project_out_{nullptr};
  norm final_norm_{nullptr};
  std::vector<decoder_layer> layers_;
  std::vector<hf_parameter> hf_params_;
};
TORCH_MODULE_IMPL(decoder, decoder_impl);

// A decoder (fp32, CPU, training mode) whose every weight is a one-element placeholder expanded to
// its shape: it costs no memory, and whoever fills the model gives each weight its data with
// set_data, as the ZeRO optimizer does from a weight_source while keeping only its own shards.
decoder make_placeholder_decoder(const model_config& config);

// transformers' ForCausalLMLoss: logits[:, :-1] against labels[:, 1:], fp32, mean over labels
// that are not -100.
torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels);

}  // namespace cohort::core::model

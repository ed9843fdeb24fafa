// T5 (v1.0 and v1.1) as torch::nn modules, computing what transformers' modeling_t5.py computes
// for T5ForConditionalGeneration: an encoder over the input ids with their attention mask, a
// decoder over the labels shifted right with causal self-attention and cross-attention on the
// encoder's output, and the LM head. Every weight keeps its Hugging Face name and layout
// (shared.weight, encoder.block.N.layer.K..., lm_head.weight when untied), so loading and saving
// map 1:1 as for the decoders (hf_io). The norms and feed-forward are the decoder's modules
// (norm_impl as RMSNorm, mlp_impl with wi_0/wi_1/wo as gate/up/down); attention is T5's own:
// no 1/sqrt(d) scaling and a learned bias per relative-position bucket, held by block 0 of each
// stack and shared by every block of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "core/model/decoder.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/model_config.hpp"

namespace cohort::core::model {

// transformers' T5Attention._relative_position_bucket: relative positions (key - query, int64,
// any shape) -> bucket ids in [0, num_buckets). bidirectional (the encoder): half the buckets for
// keys after the query; else (the decoder) keys after the query share bucket 0. Positions below
// max_exact (a quarter or half of the buckets) get a bucket each, further ones log-spaced buckets
// up to max_distance, and the last bucket beyond.
torch::Tensor t5_relative_position_bucket(const torch::Tensor& relative_position, bool bidirectional,
                                          std::int64_t num_buckets, std::int64_t max_distance);

// T5Attention: self-attention (with a relative-position bias table when it is a stack's block 0)
// or cross-attention on the encoder's output (no table).
class t5_attention_impl : public torch::nn::Module {
 public:
  t5_attention_impl(const t5_config& config, bool relative_bias, const torch::TensorOptions& options);
  // x (B, T, C) queries; memory (B, S, C) keys and values (x itself for self-attention); bias
  // (1 or B, H, T, S) added to the unscaled scores (relative bias and mask, -inf where masked).
  // Returns (B, T, C).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory, const torch::Tensor& bias);
  // The (1, H, T, S) relative bias of queries 0..T-1 against keys 0..S-1; needs the table.
  torch::Tensor position_bias(std::int64_t T, std::int64_t S, bool bidirectional) const;
  projection q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  torch::Tensor relative_attention_bias;  // (num_buckets, H); undefined without a table

 private:
  std::int64_t heads_, d_kv_, num_buckets_, max_distance_;
  double dropout_;
};
TORCH_MODULE_IMPL(t5_attention, t5_attention_impl);

// T5Block: pre-norm self-attention, cross-attention (decoder blocks only) and feed-forward, each
// added to the residual after dropout.
class t5_block_impl : public torch::nn::Module {
 public:
  t5_block_impl(const t5_config& config, bool decoder, bool relative_bias,
                const torch::TensorOptions& options);
  // x (B, T, C); self_bias (1 or B, H, T, T); memory (B, S, C) and cross_bias (B, 1, 1, S) for a
  // decoder block, undefined for an encoder block.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& self_bias,
                        const torch::Tensor& memory, const torch::Tensor& cross_bias);
  norm self_norm{nullptr}, cross_norm{nullptr}, ffn_norm{nullptr};
  t5_attention self_attn{nullptr}, cross_attn{nullptr};
  mlp ffn{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE_IMPL(t5_block, t5_block_impl);

struct t5_output {
  torch::Tensor logits;          // (B, S, V) in the model's dtype
  torch::Tensor loss;            // scalar fp32; undefined without labels
  torch::Tensor encoder_hidden;  // (B, T, C): the encoder's last hidden state, after its final norm
};

class t5_model_impl : public torch::nn::Module {
 public:
  // `options` gives dtype and device (kMeta: shapes only). Weights are left uninitialised for a
  // load (load_t5_model). Starts in training mode (dropout_rate applies); eval() stops it.
  explicit t5_model_impl(t5_config config, const torch::TensorOptions& options = {});

  // input_ids (B, T) int64; attention_mask (B, T) of 0/1 (any integer or bool dtype), undefined =
  // all ones; labels (B, S) int64 with -100 = ignored. decoder_input_ids (B, S): undefined = the
  // labels shifted right (shift_right). The loss is the cross-entropy of the logits against the
  // labels, mean over those that are not -100; undefined without labels. Throws model_error
  // (bad_input) for ids outside the vocabulary, mismatched shapes, or neither labels nor
  // decoder_input_ids.
  t5_output forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                    const torch::Tensor& labels, const torch::Tensor& decoder_input_ids = {});

  // The pieces of forward(). encode: (B, T) -> (B, T, C) after the final norm. decode: decoder ids
  // (B, S) on the encoder output -> (B, S, C) after the decoder's final norm. head: -> (B, S, V),
  // scaled by d_model^-0.5 first when scale_decoder_outputs.
  torch::Tensor encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);
  torch::Tensor decode(const torch::Tensor& decoder_input_ids, const torch::Tensor& encoder_hidden,
                       const torch::Tensor& attention_mask);
  torch::Tensor head(const torch::Tensor& hidden);
  // transformers' _shift_right: (B, S) -> (B, S) starting with decoder_start_token_id, then
  // labels[:, :-1] with -100 replaced by pad_token_id.
  torch::Tensor shift_right(const torch::Tensor& labels) const;

  // What encode and decode are made of, for a caller that runs the blocks one at a time (ZeRO-3
  // gathers one block's weights at a time): encode is embed, then each encoder block on
  // encoder_bias, then encoder_final; decode is embed, then each decoder block on
  // decoder_self_bias, the encoder's output and cross_bias, then decoder_final. The ids are not
  // checked here (encode and decode check them).
  // ids (B, T) -> (B, T, C): the shared embedding, with dropout.
  torch::Tensor embed(const torch::Tensor& ids);
  // (1 or B, H, T, T): the encoder's relative bias plus the attention mask (B, T; undefined = all ones).
  torch::Tensor encoder_bias(std::int64_t T, const torch::Tensor& attention_mask) const;
  // (1, H, S, S): the decoder's relative bias, -inf after the query (causal).
  torch::Tensor decoder_self_bias(std::int64_t S) const;
  // attention_mask (B, T) -> (B, 1, 1, T) bias: 0 where attended, -inf where masked; undefined
  // for an undefined mask.
  torch::Tensor mask_bias(const torch::Tensor& attention_mask, const torch::TensorOptions& options) const;
  // The stacks' final norm, with dropout.
  torch::Tensor encoder_final(const torch::Tensor& x);
  torch::Tensor decoder_final(const torch::Tensor& y);

  // Every weight once, in a fixed order: shared.weight, the encoder's blocks and final norm, the
  // decoder's blocks and final norm, lm_head.weight when untied. layer: encoder block i is layer
  // i, decoder block j is layer num_layers + j; -1 for the embedding, final norms, head and the
  // two relative-position tables (block 0 holds each, but every block of its stack uses it).
  const std::vector<hf_parameter>& hf_parameters() const { return hf_params_; }
  std::int64_t parameter_count() const;
  const t5_config& config() const { return config_; }
  const std::vector<t5_block>& encoder_blocks() const { return encoder_; }
  const std::vector<t5_block>& decoder_blocks() const { return decoder_; }

 private:
  void check_ids(const torch::Tensor& ids, const char* what, bool allow_ignore) const;

  t5_config config_;
  torch::Tensor shared_, lm_head_;  // lm_head_ is shared_ when tied
  std::vector<t5_block> encoder_, decoder_;
  norm encoder_norm_{nullptr}, decoder_norm_{nullptr};
  std::vector<hf_parameter> hf_params_;
};
TORCH_MODULE_IMPL(t5_model, t5_model_impl);

// Builds the T5 DIR's config.json describes and fills its weights (hf_io's rules: F32/F16/BF16,
// model.safetensors or shards with an index; encoder/decoder.embed_tokens.weight copies of
// shared.weight and a redundant lm_head.weight of a tied head are accepted). In eval mode.
t5_model load_t5_model(const std::string& dir, const load_options& options = {});
// Writes config.json and the weights as transformers' save_pretrained does (save_hf_model's rules).
void save_t5_model(const t5_model_impl& model, const std::string& dir, const save_options& options = {});

}  // namespace cohort::core::model

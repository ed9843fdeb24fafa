// The configurable causal decoder (GPT-2, Llama, Mistral, Qwen2, OPT, GPT-J) as torch::nn
// modules, computing what transformers' modeling code computes. Every weight is kept in its Hugging
// Face layout and listed under its Hugging Face name, so loading, saving and sharding map 1:1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "core/model/lora_config.hpp"
#include "core/model/model_config.hpp"

namespace cohort::core::model {

class weight_source;  // weight_source.hpp

// How a forward computes, never what: both paths compute transformers' formulas, the fused one
// in fewer, bigger kernels. plain: one GEMM per Hugging Face weight, RMSNorm written out, the LM
// head over the vocabulary as it is, the loss from (B, T, V) fp32 logits. fused: one GEMM for q,
// k and v and one for gate and up (their weights concatenated for the call only: parameters,
// Hugging Face names, checkpoints and exports stay as they are, and the backward splits the
// gradient back), RMSNorm through ATen's fused kernel where the library has one (libtorch 2.4 and
// later), the LM head over the vocabulary padded to a multiple of 64 (tensor-core shapes; the
// extra columns are -inf, so they take no probability and no gradient, and nothing outside the
// decoder ever sees them), head_loss() chunked over tokens (loss_chunk_tokens), the tanh GELUs
// as ATen's gelu(tanh), GPT-2's Conv1D bias added inside its GEMM, and in the CUDA build rotary
// and SwiGLU as one kernel each way (fused_ops.hpp). The fused path equals the plain one up to floating-point rounding. automatic: fused for CUDA tensors,
// plain elsewhere, so CPU results are bitwise the plain path's.
enum class compute_path { automatic, plain, fused };

// "automatic", "plain", "fused".
const char* compute_path_name(compute_path path);
// Parses a name of compute_path_name; throws std::invalid_argument naming `field` and the
// allowed names.
compute_path parse_compute_path(const std::string& name, const std::string& field);

// Whether `path` computes on `x` the fused way.
inline bool fused_for(compute_path path, const torch::Tensor& x) {
  return path == compute_path::fused || (path == compute_path::automatic && x.is_cuda());
}

// The vocabulary the fused LM head computes over: vocab_size rounded up to a multiple of 64.
constexpr std::int64_t padded_vocab(std::int64_t vocab_size) { return (vocab_size + 63) / 64 * 64; }

// One weight under its Hugging Face name; layer is its decoder layer or -1 (embeddings, head).
struct hf_parameter {
  std::string name;
  torch::Tensor tensor;
  std::int64_t layer = -1;
};

// The keys and values of the positions a generating decoder has seen, per layer, so that each
// new token costs one position's forward (decoder_impl::forward_cached). Keys are stored after
// rotary and before repeat_kv: (B, kv_heads, P, head_dim) in the model's dtype. Sliding-window
// layers keep every position too and mask what lies outside their window, as transformers'
// dynamic cache does. One cache per sequence batch; not shared between threads.
//
// A preallocated cache (decoder_impl::preallocated_cache, for forward_at) holds `capacity`
// positions from the start, (B, kv_heads, capacity, head_dim) zeros per layer: each forward
// writes its positions in place and attends over all of them under a mask, so that the shapes
// never change and a decode step can be captured once as a CUDA graph and replayed (as
// transformers' static cache). `length` is not kept for it: the caller knows the positions.
struct kv_cache {
  std::vector<torch::Tensor> keys, values;  // per layer; undefined until the first forward
  std::int64_t length = 0;                  // P: positions held
  std::int64_t capacity = 0;                // > 0: preallocated for this many positions
  torch::Tensor key_positions;              // preallocated: (capacity) int64 0, 1, …, on the device
  torch::Tensor inverse_frequencies;        // preallocated with rotary: (rotary_dim / 2) fp32 there
};

// Built once per sequence length and device, shared by every layer of a forward pass. Without a
// cache the T positions attend to each other; with one (forward_cached) the T new positions
// past, …, past + T - 1 attend to the past + T positions of the cache and themselves.
struct attention_context {
  // (T, rotary_dim) fp32 at the new positions, each value rounded through the activations' dtype
  // as the layers use it; undefined without rotary.
  torch::Tensor cos;
  torch::Tensor sin;  // (T, rotary_dim), the same
  // window -> (T, past + T) bool, true = may attend; 0 = causal. Without a cache only sliding
  // windows have one (plain causal attention needs no mask); with one, every window used.
  std::vector<std::pair<std::int64_t, torch::Tensor>> masks;
  std::int64_t past = 0;
  kv_cache* cache = nullptr;
  // With a preallocated cache: (T) int64 on the device, the positions this forward writes.
  torch::Tensor positions;
  const torch::Tensor& mask(std::int64_t window) const;
};

// A linear map with its weight stored as Hugging Face stores it: (out, in) for nn.Linear,
// (in, out) for GPT-2's Conv1D. With a LoRA adapter (decoder_impl::add_lora) it adds
// lora_scaling · B A dropout(x), peft's LoRA layer, whatever the weight's layout. A weight of
// another dtype than x (a frozen base held in bf16 under fp32 adapters) is converted for the call.
class projection_impl : public torch::nn::Module {
 public:
  projection_impl(std::int64_t in, std::int64_t out, bool bias, bool conv1d,
                  const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (..., in) -> (..., out)
  // The adapter's term alone, (..., in) -> (..., out); undefined without an adapter.
  torch::Tensor lora_delta(const torch::Tensor& x);
  // y (..., out), the base map of x, with the adapter's term added: peft's y + lora_delta(x) on
  // the plain path; on the fused path the scale on the rank-r product and the add inside the
  // second GEMM (no output-sized delta), equal up to rounding.
  torch::Tensor with_adapter(const torch::Tensor& y, const torch::Tensor& x);
  torch::Tensor weight, bias;
  bool conv1d;
  // The fused path adds a Conv1D's bias inside its GEMM (addmm).
  compute_path path = compute_path::automatic;  // decoder_impl::set_compute_path sets it
  std::int64_t in_features, out_features;
  torch::Tensor lora_a, lora_b;  // (r, in), (out, r); undefined without an adapter
  double lora_scaling = 0, lora_dropout = 0;
  // The weight's rows lie in its group's block with the group's LoRA room to their right
  // (decoder_impl::load_frozen; grouped_lora::room); false: no room.
  bool lora_room = false;
};
TORCH_MODULE_IMPL(projection, projection_impl);

// LayerNorm or RMSNorm (RMSNorm normalises in fp32, as transformers does). The fused path on
// CUDA runs cohort's own kernels (fused_norm), the residual add included in add_forward.
class norm_impl : public torch::nn::Module {
 public:
  norm_impl(const model_config& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C)
  // {h, norm(h)} with h = x + delta (x's shape and dtype).
  std::pair<torch::Tensor, torch::Tensor> add_forward(const torch::Tensor& x, const torch::Tensor& delta);
  torch::Tensor weight, bias;  // undefined when not affine / RMSNorm has no bias
  norm_kind kind;
  double eps;
  compute_path path = compute_path::automatic;  // decoder_impl::set_compute_path sets it

 private:
  bool own_kernel(const torch::Tensor& x) const;  // the fused path's kernels take x
};
TORCH_MODULE_IMPL(norm, norm_impl);

class attention_impl : public torch::nn::Module {
 public:
  attention_impl(const model_config& config, std::int64_t layer, const torch::TensorOptions& options);
  // (B, T, C) -> (B, T, C); with ctx.cache, appends this layer's keys and values to it.
  torch::Tensor forward(const torch::Tensor& x, const attention_context& ctx);
  projection qkv{nullptr};  // fused (GPT-2), else q, k, v
  projection q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  // The fused path runs separate q, k, v as one GEMM (concat_linear); the plain one as three.
  compute_path path = compute_path::automatic;  // decoder_impl::set_compute_path sets it

 private:
  // The fused path's q, k and v of separate projections, apart: one GEMM, and Llama's rotary in
  // one kernel after it or, with the own GEMM, inside it. `rotated` says whether rotary is applied.
  std::vector<torch::Tensor> fused_qkv(const torch::Tensor& x, const attention_context& ctx, bool& rotated);

  std::int64_t layer_, heads_, kv_heads_, head_dim_, rotary_dim_, window_;
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
  // The fused path runs gate and up as one GEMM (concat_linear); the plain one as two.
  compute_path path = compute_path::automatic;  // decoder_impl::set_compute_path sets it

 private:
  std::string activation_;
  double act_dropout_, resid_dropout_;
};
TORCH_MODULE_IMPL(mlp, mlp_impl);

// The residual stream between two layers as base + delta with the add not yet done: a pre-norm
// layer leaves its MLP's output pending, and the next layer's first norm adds it inside its own
// kernel on the fused path (one pass each way where an add and its gradient's accumulation were
// two). delta undefined: nothing pending.
struct residual_stream {
  torch::Tensor base, delta;  // (B, T, C), one shape and dtype
  torch::Tensor sum() const { return delta.defined() ? base + delta : base; }
};

// One decoder block. The engine may call layers one by one (activation checkpointing, ZeRO-3
// gathering of one layer's weights at a time).
class decoder_layer_impl : public torch::nn::Module {
 public:
  decoder_layer_impl(const model_config& config, std::int64_t layer,
                     const torch::TensorOptions& options);
  // The layer on x.sum(); its output may leave the last add pending (pre-norm, sequential
  // residual). The same values as forward(x.sum()) op for op.
  residual_stream forward(const residual_stream& x, const attention_context& ctx);
  torch::Tensor forward(const torch::Tensor& x, const attention_context& ctx);  // (B, T, C)
  norm norm1{nullptr}, norm2{nullptr};  // norm2 absent with a parallel residual
  attention attn{nullptr};
  mlp ffn{nullptr};

 private:
  bool parallel_residual_, norm_before_;
};
TORCH_MODULE_IMPL(decoder_layer, decoder_layer_impl);

struct decoder_output {
  torch::Tensor logits;  // (B, T, V) in the model's dtype (fused path: a view of (B, T, V'))
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

  // Generation: the logits (B, T, V) of the T positions of input_ids that follow the cache's
  // (the whole prompt first, then one token at a time), appending their keys and values to it.
  // No labels, no gradients wanted (call it under torch::NoGradGuard). Throws model_error
  // (bad_input) when past + T exceeds a learned-position model's max_positions.
  torch::Tensor forward_cached(const torch::Tensor& input_ids, kv_cache& cache);
  // A cache of `capacity` positions for `batch` rows on `device`, in the activations' dtype, for
  // forward_at. Throws model_error (bad_input) when capacity exceeds a learned-position model's
  // max_positions.
  kv_cache preallocated_cache(std::int64_t batch, std::int64_t capacity, const torch::Device& device) const;
  // forward_cached with a preallocated cache: the logits (B, T, V) of input_ids (B, T) at
  // `positions` (T, int64, on the model's device, below the capacity, each position's earlier
  // ones written before), writing their keys and values there. Nothing in it reads the device
  // from the host (no checks of ids or positions: the caller's), so it can be captured as a CUDA
  // graph. The same logits as forward_cached up to the order of sums over masked positions.
  torch::Tensor forward_at(const torch::Tensor& input_ids, const torch::Tensor& positions, kv_cache& cache);

  // The pieces of forward(), for an engine that drives the layers itself. `past`: positions
  // before input_ids' first (generation with a cache).
  torch::Tensor embed(const torch::Tensor& input_ids, std::int64_t past = 0);  // (B, T) -> (B, T, C)
  // embed() of ids the caller has checked (check_token_ids on their host copy): only their
  // length is checked, nothing is read back from the device, so that a training step can be
  // captured as a CUDA graph (and need not wait for the device where it starts).
  torch::Tensor embed_checked(const torch::Tensor& input_ids);
  attention_context context(std::int64_t seq_len, const torch::Device& device,
                            std::int64_t past = 0) const;
  // (B, T, C) -> (B, T, V): the final norm, projection and LM head. On the fused path the GEMM
  // runs over padded_vocab(V) columns and the result is a view of its first V.
  torch::Tensor head(const torch::Tensor& hidden);
  // The causal LM loss of the last layer's output `hidden` (B, T, C) against labels (B, T)
  // (int64, -100 = ignored): position t predicts labels[t + 1], in fp32; summed over the labels
  // that count with `sum`, else their mean (causal_lm_loss). The plain path is
  // causal_lm_loss(head(hidden), labels, sum), op for op. The fused path shifts the labels
  // instead of the logits (the last position and -100 count for nothing; nothing waits on the
  // host to find them) and computes logits over the padded vocabulary loss_chunk_tokens()
  // positions at a time (chunked_lm_head_loss), never all (B, T, V) of them;
  // loss_chunk_tokens() == 0: all positions in one piece. Labels must be -100 or in [0, V): the
  // fused path does not check them (the engine's data set was checked against the vocabulary).
  torch::Tensor head_loss(const torch::Tensor& hidden, const torch::Tensor& labels, bool sum);
  // A sequence classifier (config().num_labels > 0): the score (B, num_labels), in the model's
  // dtype, of each row of input_ids (B, T) at its last token that is not pad_token_id
  // (last_token_index), from the last layer's output `hidden` (B, T, C): the final norm and
  // output projection, then `score`, as transformers' …ForSequenceClassification pools its
  // logits. Throws model_error (bad_input) for a model with an LM head. head(), head_loss(),
  // forward() and forward_cached() throw it for a classifier.
  torch::Tensor sequence_scores(const torch::Tensor& hidden, const torch::Tensor& input_ids);
  const std::vector<decoder_layer>& layers() const { return layers_; }

  // Sets the compute path of every module of the model (default automatic). Not thread-safe
  // against a running forward.
  void set_compute_path(compute_path path);
  compute_path path() const { return path_; }
  // Positions per chunk of the fused path's head_loss (default 2048; 0: unchunked). Throws
  // std::invalid_argument for a negative count.
  void set_loss_chunk_tokens(std::int64_t tokens);
  std::int64_t loss_chunk_tokens() const { return loss_chunk_tokens_; }

  // Every weight once (a tied lm_head is not listed), in a fixed order: embeddings, layers in
  // order, final norm, output projection, lm_head. With LoRA these are the frozen base's.
  const std::vector<hf_parameter>& hf_parameters() const { return hf_params_; }

  // LoRA: gives every linear map of the layers whose name ends in one of config.target_modules an
  // adapter, A (r, in) and B (out, r) in `dtype` on the weights' device, uninitialised (fill them
  // from lora_init, weight_source.hpp), and freezes every base weight (requires_grad false). The
  // activations then run in `dtype` from the embedding on (a base of another dtype is converted
  // where it is used). Throws model_error (bad_input) for targets the family does not have
  // (check_lora_config) and when the model has adapters already.
  void add_lora(const lora_config& config, torch::ScalarType dtype);
  // LoRA: loads every frozen weight (requires_grad false) from `source` onto `device` in `dtype`,
  // each layer's in one buffer in hf_parameters() order, so that the fused path's q/k/v and
  // gate/up GEMMs read their rows in place (stacked_rows). A group of them whose adapters the
  // fused path groups (each with an adapter, one scale) lies in a block of its own whose rows
  // have the room for the group's B's to their right (lora_room, grouped_lora::room): the base map
  // and the adapters' term are then one GEMM. Not where `dtype` is not the activations' (each call
  // converts such a base). Weights that train are left alone.
  void load_frozen(const weight_source& source, torch::ScalarType dtype, const torch::Device& device);
  // The adapters, in layer order, each module's A then B, named lora_a_name / lora_b_name of the
  // module's Hugging Face name (layer = its layer); empty without LoRA.
  const std::vector<hf_parameter>& lora_parameters() const { return lora_params_; }
  const lora_config& lora() const { return lora_; }
  bool has_lora() const { return !lora_params_.empty(); }
  // Throws model_error (bad_weights) for a name the model does not have.
  const torch::Tensor& hf_tensor(const std::string& name) const;
  std::int64_t parameter_count() const;
  const model_config& config() const { return config_; }

 private:
  void check_ids(const torch::Tensor& ids, const char* what, bool allow_ignore) const;
  void check_length(std::int64_t T, const char* what) const;  // learned positions: T of them at most
  // embed() at positions (T) int64 on the device, unchecked.
  torch::Tensor embed_at(const torch::Tensor& input_ids, const torch::Tensor& positions);
  // The rotary tables (cos, sin) at fp32 positions (T) with inverse frequencies `inv` there.
  std::pair<torch::Tensor, torch::Tensor> rotary_tables(const torch::Tensor& positions,
                                                        const torch::Tensor& inv) const;
  // The input of the LM head: hidden after the final norm and the output projection.
  torch::Tensor head_input(const torch::Tensor& hidden);
  // The LM head's weight and bias as the fused path uses them: padded to padded_vocab(V) rows
  // (zeros) and the bias to as many entries (-inf past V); undefined bias when there is nothing
  // to add. Copies for the call; the parameters stay (V, E) and (V).
  std::pair<torch::Tensor, torch::Tensor> padded_head() const;
  void list(const std::string& name, const torch::Tensor& t, std::int64_t layer);
  void check_lm_head(const char* what) const;  // throws for a sequence classifier

  model_config config_;
  torch::Tensor embed_tokens_, embed_positions_, lm_head_weight_, lm_head_bias_;
  torch::Tensor score_weight_;  // (num_labels, E), a sequence classifier's; else undefined
  projection project_in_{nullptr}, project_out_{nullptr};
  norm final_norm_{nullptr};
  std::vector<decoder_layer> layers_;
  std::vector<hf_parameter> hf_params_;
  // Every linear map of the layers under its Hugging Face module name, for add_lora.
  struct named_projection {
    std::string module;
    projection proj;
    std::int64_t layer;
  };
  std::vector<named_projection> projections_;
  std::vector<hf_parameter> lora_params_;
  lora_config lora_;
  std::optional<torch::ScalarType> activation_dtype_;  // LoRA: the adapters' dtype
  compute_path path_ = compute_path::automatic;
  std::int64_t loss_chunk_tokens_ = 2048;
};
TORCH_MODULE_IMPL(decoder, decoder_impl);

// Puts a model in eval mode (no dropout) for a scope and back in the mode it had, however the
// scope ends.
class eval_scope {
 public:
  explicit eval_scope(decoder_impl& model) : model_(model), was_training_(model.is_training()) { model_.eval(); }
  ~eval_scope() { model_.train(was_training_); }
  eval_scope(const eval_scope&) = delete;
  eval_scope& operator=(const eval_scope&) = delete;

 private:
  decoder_impl& model_;
  bool was_training_;
};

// A decoder (fp32, CPU, training mode) whose every weight is a one-element placeholder expanded to
// its shape: it costs no memory, and whoever fills the model gives each weight its data with
// set_data, as the ZeRO optimizer does from a weight_source while keeping only its own shards.
decoder make_placeholder_decoder(const model_config& config);

// Checks token ids against a vocabulary: `ids` a non-empty (B, T) int64 tensor of ids in
// [0, vocab_size) (or -100 with allow_ignore). Throws model_error (bad_input) naming `what` and
// the first bad entry.
void check_token_ids(const torch::Tensor& ids, const char* what, std::int64_t vocab_size,
                     bool allow_ignore);

// Where a sequence classifier reads each row's score, as transformers finds it: the largest
// position t of input_ids (B, T) whose id is not pad_token_id ((t · [id != pad]).argmax, so a
// row of padding only reads position 0); without a pad id, T - 1. (B) int64 on input_ids' device.
torch::Tensor last_token_index(const torch::Tensor& input_ids, std::optional<std::int64_t> pad_token_id);

// DeepSpeed-Chat's pairwise reward loss summed over pairs: Σ −log σ(chosen − rejected) as
// Σ softplus(rejected − chosen) (no overflow for large margins), fp32. chosen and rejected (N).
torch::Tensor pairwise_reward_loss(const torch::Tensor& chosen, const torch::Tensor& rejected);

// transformers' ForCausalLMLoss: logits[:, :-1] against labels[:, 1:], fp32, mean over labels
// that are not -100 (their sum with `sum`).
torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                             bool sum = false);

// y = x W^T + b for W the rows of `weights` stacked, b the entries of `biases` concatenated (none,
// or one per weight): one GEMM in place of one per weight, forward and backward. x
// (..., in), weights (out_i, in) of x's dtype -> (..., sum out_i). The concatenated weight is a
// temporary of the call and of the backward: autograd keeps the weights themselves, so a ZeRO-3
// unit released between a layer's forward and its backward holds no copy of them.
//
// `lora`, when defined, adds LoRA adapters of those weights inside the same call (the fused path's
// grouped adapters), each weight's output columns seeing their own adapter: h = x aᵀ · scaling
// (the scale inside the GEMM), and y += h_i b_iᵀ. With `room` the base map and the adapters' term
// are one GEMM, [x | h | 0] times the rows [W | B's block-diagonal | 0]ᵀ: x is copied once beside
// h, and each B into the room, instead of the output (wider than x for q/k/v and gate/up) read
// and written again. Without it each y_i += h_i b_iᵀ in place on the GEMM's output. The backward
// adds h's share of x's gradient into the same buffer. No output-sized delta or gradient is made
// apart, added or copied.
struct grouped_lora {
  torch::Tensor a;               // (Σ r, in): every adapter's A stacked
  std::vector<torch::Tensor> b;  // each weight's B (out_i, r_i), in the weights' order
  double scaling = 0;
  // (Σ out_i, row stride ≥ in + Σ r), undefined without room: a view of the weights' rows
  // (stacked_rows) and the columns to their right up to the row stride; the call fills the first
  // Σ r of those with the B's block-diagonal (the rest of them stays zero). Only where those
  // columns are the weights' own (lora_room).
  torch::Tensor room;
  bool defined() const { return a.defined(); }
};
torch::Tensor concat_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                            const std::vector<torch::Tensor>& biases, const grouped_lora& lora = {});

// The rows of `weights` (each (rows_i, cols), one dtype and cols) stacked: (sum rows_i, cols). A
// view without a copy when each lies right after the one before in one storage at one row stride
// (as ZeRO-3's unit buffer keeps a layer's q, k, v and its gate, up, contiguous, and a LoRA base
// with room: concat_linear then reads the weights in place); torch::cat otherwise. Not
// differentiable itself (concat_linear's own backward uses it).
torch::Tensor stacked_rows(const std::vector<torch::Tensor>& weights);
// The row stride of stacked_rows' view of `weights`; 0 where it would copy them.
std::int64_t adjacent_row_stride(const std::vector<torch::Tensor>& weights);

// The summed cross-entropy of logits x W^T + b (fp32 log-softmax) against targets, for
// `chunk_rows` rows of x at a time: a chunk's logits are computed in x's dtype (bf16 in mixed
// precision) and their log-softmax in fp32, and no more than one chunk's logits exist at once.
// x (N, C), weight (V', C), bias (V') or undefined, targets (N) int64 in [0, V') or -100 (the
// row counts for nothing); chunk_rows >= 1 (else model_error). Returns a fp32 scalar. When a
// gradient is wanted, the forward computes it too (the loss ends the graph): the backward only
// scales what the forward kept. On CUDA in the CUDA build a chunk's loss and gradient are one
// kernel (fused_cross_entropy) over its logits instead of ATen's six.
torch::Tensor chunked_lm_head_loss(const torch::Tensor& x, const torch::Tensor& weight,
                                   const torch::Tensor& bias, const torch::Tensor& targets,
                                   std::int64_t chunk_rows);

}  // namespace cohort::core::model

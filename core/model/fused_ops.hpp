// The decoder's fused elementwise ops as autograd functions over torch tensors: rotary embedding
// on a fused q/k/v projection, SwiGLU on a fused gate/up projection and the norms with the
// residual add before them, each one CUDA kernel forward and one backward (the norms: plus their
// weights' gradient) (fused_kernels.hpp); and the LM head's cross-entropy with its gradient in one
// kernel; and the optimizer's kernels. Built into the CUDA build only; elsewhere
// fused_kernels_available() is false and the decoder composes the same formulas from ATen ops.
//
// Numerics: every output element is computed in fp32 from the inputs and rounded once to the
// input's dtype, where transformers' eager code rounds after each op; results match it up to
// that rounding. Tensors must be CUDA tensors of one device in fp32, bf16 or fp16; the ops run on
// the current stream of that device and never synchronise the host.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "core/model/adamw.hpp"

namespace cohort::core::model {

// Whether this build has the kernels (the CUDA build) and `x` can use them: a CUDA tensor of
// fp32, bf16 or fp16.
bool fused_kernels_available(const torch::Tensor& x);

// Llama-style rotary (rotate_half) on the q and k parts of a fused projection, returned apart.
// qkv (.., T, cols): q's heads in its first q_cols columns, k's in the next k_cols, v in the rest
// (head_dim each, even); cos, sin (T, head_dim) fp32 at the T positions, used as given (rounded
// as the model rounds them: attention_context's tables). Returns {q, k, v}, each a new
// contiguous (.., T, its columns): q and k rotated, v copied. Differentiable in qkv, whose
// gradient is written in one piece from the three (no concatenation).
std::vector<torch::Tensor> fused_rotary_qkv(const torch::Tensor& qkv, const torch::Tensor& cos,
                                            const torch::Tensor& sin, std::int64_t q_cols,
                                            std::int64_t k_cols, std::int64_t head_dim);
// fused_rotary_qkv's backward on its own: qkv's gradient (.., T, q_cols + k_cols + v_cols), one
// piece, from q's, k's and v's: each (.., T, its columns) of one dtype and device, or undefined
// (it counts as zero; at least one defined).
torch::Tensor fused_rotary_qkv_backward(const std::vector<torch::Tensor>& grads, const torch::Tensor& cos,
                                        const torch::Tensor& sin, std::int64_t q_cols, std::int64_t k_cols,
                                        std::int64_t v_cols, std::int64_t head_dim);

// silu(gate) * up from gate_up (..., 2 * inner), gate first: (..., inner). Saves gate_up only
// for the backward. Differentiable in gate_up.
torch::Tensor fused_swiglu(const torch::Tensor& gate_up);
// SwiGLU's backward on its own: the gradient of gate_up (..., 2 * inner) from that of the output
// (..., inner) and the forward's gate_up (fused_swiglu's backward kernel).
torch::Tensor fused_swiglu_backward(const torch::Tensor& grad_out, const torch::Tensor& gate_up);

// Whether x is a CUDA tensor on a device of compute capability 9.0 (H100, H200), the devices
// cohort's own Hopper GEMM is built for, whether or not this build has it.
bool hopper_device(const torch::Tensor& x);

// Whether fused_linear_swiglu takes these: a build with cohort's own Hopper GEMM
// (hopper_gemm.hpp), x a contiguous bf16 (..., in) on a device of compute capability 9.0, gate
// and up bf16 (inner, in) on it with rows one stride apart (a multiple of 8, columns contiguous),
// and whole tiles (rows of x a multiple of 128, in of 64, inner of 128).
bool fused_linear_swiglu_fits(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& up);

// The gate/up projection of x and SwiGLU in one kernel, no autograd: {gate_up (..., 2 * inner),
// gate's columns first, h (..., inner)}, h = silu(g) up of the bf16 g and up as fused_swiglu
// computes it. Throws std::invalid_argument where fused_linear_swiglu_fits is false.
std::pair<torch::Tensor, torch::Tensor> fused_linear_swiglu(const torch::Tensor& x, const torch::Tensor& gate,
                                                            const torch::Tensor& up);

// x (..., in) weightᵀ in cohort's own Hopper GEMM, no autograd: the product its fused launchers
// build on, rounded once to bf16. Takes what fused_linear_rotary_qkv_fits takes of x and the weight
// (whole tiles: the weight's rows a multiple of 256); throws std::invalid_argument otherwise.
torch::Tensor own_linear(const torch::Tensor& x, const torch::Tensor& weight);

// Whether fused_linear_rotary_qkv takes these: a build with cohort's own Hopper GEMM, x a
// contiguous bf16 (.., T, in) on a device of compute capability 9.0, weight bf16 (q_cols + k_cols
// + v_cols, in) on it with contiguous columns and rows a multiple of 8 apart (q's, k's and v's rows
// stacked), heads of head_dim (a multiple of 16 dividing 256), q_cols and k_cols multiples of it,
// each part's columns a multiple of 64 and all of them of 256, and whole tiles (rows of x a
// multiple of 128, in of 64).
bool fused_linear_rotary_qkv_fits(const torch::Tensor& x, const torch::Tensor& weight, std::int64_t q_cols,
                                  std::int64_t k_cols, std::int64_t head_dim);

// The q/k/v projection of x and rotary on q's and k's heads in one kernel, no autograd: {q, k, v}
// as fused_rotary_qkv(x weightᵀ, cos, sin, q_cols, k_cols, head_dim) returns them, from the own
// GEMM's bf16 product turned by the rotary kernel's formula (the same bits). Throws
// std::invalid_argument where fused_linear_rotary_qkv_fits is false or cos/sin are not fp32
// (T, head_dim) on x's device.
std::vector<torch::Tensor> fused_linear_rotary_qkv(const torch::Tensor& x, const torch::Tensor& weight,
                                                   const torch::Tensor& cos, const torch::Tensor& sin,
                                                   std::int64_t q_cols, std::int64_t k_cols,
                                                   std::int64_t head_dim);

// Whether fused_swiglu_input_grad takes a gradient shaped as x (..., hidden) through down
// (hidden, inner): fused_linear_swiglu_fits's conditions for x, down bf16 on x's device with
// contiguous columns and rows a multiple of 8 apart, and inner a multiple of 256.
bool fused_swiglu_input_grad_fits(const torch::Tensor& x, const torch::Tensor& down);

// SwiGLU's backward inside the down projection's input-gradient GEMM, no autograd: d gate_up
// (..., 2 * inner) from grad_y (..., hidden), down (hidden, inner) and the forward's gate_up,
// as fused_swiglu_backward computes it from dh = grad_y down rounded to bf16 (dh is not
// written). Throws std::invalid_argument where fused_swiglu_input_grad_fits is false.
torch::Tensor fused_swiglu_input_grad(const torch::Tensor& grad_y, const torch::Tensor& down,
                                      const torch::Tensor& gate_up);

// x (..., in) @ weight (in, out) + bias (out), GPT-2's Conv1D, as one GEMM that adds the bias
// (addmm); the backward's GEMMs as ATen's, the bias's gradient by kernels::column_sum (one pass,
// fp32 sums in a fixed order) where autograd would run ATen's reduction. CUDA, one dtype.
torch::Tensor fused_biased_matmul(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// gelu_tanh(x (..., in) @ weight + bias (out)): the up projection and activation of GPT-2's MLP
// (gelu_new and its kin), weight (in, out) as GPT-2's Conv1D (conv1d) or (out, in) as nn.Linear.
// The forward as ATen's addmm (the bias added in the GEMM) and gelu(tanh); the backward's GELU
// by kernels::gelu_tanh_backward, which sums the bias's gradient in the same pass (where autograd
// would read GELU's input gradient once more for it), then the GEMMs as ATen's. Saves x, the
// weight and GELU's input (as autograd would). CUDA, one dtype.
torch::Tensor fused_biased_gelu(const torch::Tensor& x, const torch::Tensor& weight,
                                const torch::Tensor& bias, bool conv1d);

// Whether fused_norm takes x: fused_kernels_available(x) and a last dimension of 1 up to
// kernels::norm_max_cols (16,384 fp32 / 32,768 bf16 elements where rows are 16-byte multiples).
bool fused_norm_available(const torch::Tensor& x);

// RMSNorm (layer_norm false) or LayerNorm of x over its last dimension; with `residual` defined,
// of h = x + residual (rounded once to x's dtype), the residual stream's add fused into the norm.
// Returns {y} or {y, h}. weight and bias: (last dimension) in x's dtype, or undefined for 1 and 0
// (RMSNorm has no bias). Statistics in fp32 as ATen's norms; y rounded once. Differentiable in x,
// residual, weight and bias; the gradient h gets from its other uses (the next residual add) is
// added inside the norm's backward kernel, where autograd would run an add of its own. The
// weights' gradients are summed in a fixed order (the same on every run). Saves h, the weight and
// two fp32 values per row.
std::vector<torch::Tensor> fused_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                      const torch::Tensor& weight, const torch::Tensor& bias, bool layer_norm,
                                      double eps);

// The summed cross-entropy of logits (n, V) against targets (n) int64 in [0, V) or -100 (the row
// counts for nothing), as an fp32 scalar; with want_grad, the logits are overwritten with the
// gradient of that sum, softmax - one_hot(target) per row (zero rows for -100), in their dtype.
// Not differentiable itself: chunked_lm_head_loss calls it with the gradient it then applies.
// -inf logits (padding columns) get probability 0; a target out of range makes the loss NaN.
// logits contiguous; the host never waits.
torch::Tensor fused_cross_entropy(torch::Tensor& logits, const torch::Tensor& targets, bool want_grad);

// One parameter (or shard) of fused_adamw_step: master contiguous fp32 on a CUDA device, updated
// in place; grad contiguous fp32, bf16 or fp16 of master's numel on its device, read only; state
// its AdamW state; copy undefined, or contiguous fp32, bf16 or fp16 of master's numel on its
// device, written with the updated master rounded once (the compute-dtype weights without a cast
// of their own).
struct fused_adamw_target {
  torch::Tensor master;
  torch::Tensor grad;
  adamw_state* state = nullptr;
  torch::Tensor copy;
};

// adamw_step on every target, one kernel launch per kind of target (kernels::adamw; targets of
// one device, kinds by their gradient's and copy's dtype): each gradient multiplied, as it is read, by
// grad_scale, and by device_scale where defined (one fp64 element on the targets' device, rounded
// to fp32: a clipping coefficient the host has not read), which is clipping without a pass of its
// own. A state's moments are created on its first step, as adamw_step does, and its step count
// bumped. Equal to adamw_step on grad * grad_scale within fp32 rounding; the host never waits
// (the kernel's table of tensors goes to the device by an asynchronous copy).
void fused_adamw_step(const std::vector<fused_adamw_target>& targets, const adamw_options& options,
                      double grad_scale, const torch::Tensor& device_scale = {});
// The same for one target.
void fused_adamw_step(torch::Tensor master, const torch::Tensor& grad, adamw_state& state,
                      const adamw_options& options, double grad_scale, const torch::Tensor& copy,
                      const torch::Tensor& device_scale = {});

// The sum of the squares of a contiguous fp32, bf16 or fp16 CUDA tensor, accumulated in fp64 in a
// fixed order (the same value on every run), as a 0-dim fp64 tensor on its device; the host
// never waits. Where grad_square_sum materialises an fp64 copy of the gradient, this reads it once.
torch::Tensor fused_square_sum(const torch::Tensor& x);
// The same over several such tensors of one device, summed into one value in a fixed order: one
// kernel for every tensor's partial sums and one for the total.
torch::Tensor fused_square_sum(const std::vector<torch::Tensor>& xs);

// xs (contiguous bf16 or fp16 CUDA tensors, one dtype and device) converted to fp32 into `out`
// (contiguous fp32 on that device, at least their total size), one after another from its start,
// in one launch: what a copy_ each did in as many (a ZeRO unit's gradients into the buffer its
// reduce-scatter sums, at half the memory speed). Throws std::invalid_argument otherwise.
void fused_widen_into(const std::vector<torch::Tensor>& xs, torch::Tensor& out);

}  // namespace cohort::core::model

// The decoder's own CUDA kernels (fused_kernels.cu, built with nvcc in the CUDA build only):
// rotary embedding and SwiGLU, each one kernel forward and one backward where ATen runs five to
// eight elementwise kernels; RMSNorm and LayerNorm with the residual add before them; the LM
// head's cross-entropy with its gradient in one kernel; and the optimizer's AdamW update and
// gradient sum of squares, each one pass over memory. Torch-free:
// raw device pointers, element counts and a stream, so that nvcc never compiles a libtorch
// header. fused_ops.hpp is the torch-level interface.
//
// Contract for every launcher:
//  - pointers are device memory of the current device; `stream` is a cudaStream_t passed as
//    void* (the caller's current stream); the launch is asynchronous on it and nothing is
//    allocated or synchronised;
//  - dtype names the element type of every activation pointer (f32, bf16 or f16); cos/sin and
//    every accumulation are fp32; each output element is rounded once to dtype;
//  - outputs never alias inputs;
//  - returns the launch's cudaError_t as an int (0 = success).
#pragma once

#include <cstdint>

namespace cohort::core::model::kernels {

enum class dtype { f32, bf16, f16 };
enum class direction { forward, backward };

// A row-major (rows, cols) tensor held as up to three blocks of columns, each a row-major
// (rows, cols[i]) array of its own: q, k and v of a fused projection kept apart. A contiguous
// tensor is one part of all the columns (the others null, of 0 columns).
struct column_parts {
  void* part[3] = {nullptr, nullptr, nullptr};
  std::int64_t cols[3] = {0, 0, 0};
};

// Rotary embedding, Llama's rotate_half pairing (i with i + head_dim/2), over a row-major
// (rows, cols) tensor whose first rot_cols columns are heads of head_dim (q's and k's heads of a
// fused q/k/v projection); columns rot_cols..cols are copied unchanged (v). Row r is position
// r % seq_len, and cos/sin are (seq_len, head_dim) fp32, row-major.
// forward:  y_i = x_i cos_i - x_{i+h} sin_i,   y_{i+h} = x_{i+h} cos_{i+h} + x_i sin_{i+h}
// backward: the transpose of that map applied to the output's gradient:
//           dx_i = g_i cos_i + g_{i+h} sin_{i+h},  dx_{i+h} = g_{i+h} cos_{i+h} - g_i sin_i
// in (read) and out (written) are each held as column_parts of the same cols in all (so the
// backward reads q's, k's and v's gradients apart and writes the projection's in one piece); a
// part boundary below rot_cols falls between two heads. head_dim even and at most 4096, rot_cols
// a multiple of head_dim, rot_cols <= cols < 2^31.
int rotary_half(direction dir, dtype type, const column_parts& in, const column_parts& out, const float* cos,
                const float* sin, std::int64_t rows, std::int64_t rot_cols, std::int64_t head_dim,
                std::int64_t seq_len, void* stream);

// SwiGLU over gate_up (rows, 2 * inner), row-major, gate in the first half of each row and up in
// the second: out (rows, inner) = silu(gate) * up.
int swiglu_forward(dtype type, const void* gate_up, void* out, std::int64_t rows,
                   std::int64_t inner, void* stream);
// Its backward: grad_gate_up (rows, 2 * inner) from grad_out (rows, inner) and the forward's
// gate_up: d gate = g * up * silu'(gate), d up = g * silu(gate).
int swiglu_backward(dtype type, const void* grad_out, const void* gate_up, void* grad_gate_up,
                    std::int64_t rows, std::int64_t inner, void* stream);

// Cross-entropy of each row of logits (rows, cols), row-major, against its target, and the
// gradient of their sum, in one kernel: a row that fits a block's shared memory (on an H200 up to
// 116,160 16-bit logits, 58,080 fp32) is read once into it and its gradient written from there (4
// bytes of traffic per 16-bit logit; where ATen casts to fp32, runs log-softmax, NLL, their two
// backwards and a cast back: about 40), a longer row in two passes (6 bytes). Rows may start
// anywhere (an odd vocabulary). One block per row; fp32 math from the dtype logits.
//   targets (rows) int64: in [0, cols), or ignore_index (the row counts for nothing);
//   loss (rows) fp32, written: logsumexp(row) - row[target]; 0 for an ignored row; NaN for a
//     target outside [0, cols) that is not ignore_index;
//   grad (rows, cols) dtype, written unless null: softmax(row) - one_hot(target), each element
//     rounded once; all zero for an ignored row. grad may be the logits themselves (each row is
//     read whole before any of it is written); otherwise the two do not overlap.
// -inf logits (the padding columns of a padded vocabulary) get probability 0; a row needs one
// finite logit.
int cross_entropy(dtype type, const void* logits, const std::int64_t* targets, float* loss,
                  void* grad, std::int64_t rows, std::int64_t cols, std::int64_t ignore_index,
                  void* stream);

// AdamW's scalars common to a launch, as torch.optim.AdamW(fused=True) derives them (computed by
// the caller in double, used in fp32); the step's own two are per tensor (adamw_tensor).
struct adamw_scalars {
  float lr = 0;
  float beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  float one_minus_beta1 = 0, one_minus_beta2 = 0;  // in double first: 1 - 0.999f is 1.3e-5 off
  float grad_scale = 1;              // the gradient is multiplied by this as it is read (clipping)
  const double* device_scale = nullptr;  // device fp64, or null: and by *device_scale rounded to
                                         // fp32 (a clipping coefficient the host has not read)
};

// One tensor of an AdamW launch. param, exp_avg, exp_avg_sq: n fp32, updated in place; grad: n of
// the launch's grad_type (read only); copy: n of its copy_type, written with the updated param
// rounded once (the compute-dtype weights), or null. The caller fills these; adamw_blocks fills
// the rest.
struct adamw_tensor {
  float* param = nullptr;
  const void* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  void* copy = nullptr;
  std::int64_t n = 0;
  float step_size = 0;              // lr / (1 - beta1^step), of this tensor's step count
  float bias_correction2_sqrt = 0;  // sqrt(1 - beta2^step)
  std::int64_t first_block = 0;     // adamw_blocks: the first block of the launch on this tensor
  int vectorised = 0;               // adamw_blocks: groups of 4 elements, every pointer aligned
};

// AdamW on every tensor of a table in one launch, one pass over memory, element for element the
// arithmetic of ATen's fused AdamW in fp32:
//   g = grad * grad_scale;  param *= 1 - lr * weight_decay;
//   exp_avg = beta1 exp_avg + one_minus_beta1 g;  exp_avg_sq = beta2 exp_avg_sq + one_minus_beta2 g^2;
//   param -= step_size * exp_avg / (sqrt(exp_avg_sq) / bias_correction2_sqrt + eps).
// adamw_blocks fills the host table's first_block and vectorised fields and returns the launch's
// block count (each block updates a fixed stretch of one tensor); adamw then runs on that table
// copied to device memory (`count` entries, every grad of grad_type and every copy of copy_type).
// The tensors do not overlap.
std::int64_t adamw_blocks(dtype grad_type, dtype copy_type, adamw_tensor* tensors, int count);
int adamw(dtype grad_type, dtype copy_type, const adamw_tensor* device_tensors, int count,
          std::int64_t blocks, const adamw_scalars& scalars, void* stream);

// One tensor of a sum of squares: n elements of `type` at x. square_partial_blocks fills the rest.
struct square_tensor {
  const void* x = nullptr;
  std::int64_t n = 0;
  dtype type = dtype::f32;
  int first_partial = 0;  // its first partial sum's index
  int partials = 0;       // how many: each a block summing a fixed stride of its elements
  int vectorised = 0;     // 16-byte groups
};

// Sums of squares in fp64, the same value on every run, for several tensors in one go:
// square_partial_blocks fills the host table's first_partial, partials and vectorised fields
// (at most square_sum_partials partials a tensor) and returns their total; square_partials then
// writes every tensor's partials into `partials` (fp64, that total) in one launch, from the table
// copied to device memory; sum_partials adds `count` partials (device fp64) in order into *out
// (one block).
constexpr int square_sum_partials = 1024;
int square_partial_blocks(square_tensor* tensors, int count);
int square_partials(const square_tensor* device_tensors, int count, int total, double* partials,
                    void* stream);
int sum_partials(const double* partials, int count, double* out, void* stream);

// One tensor of a conversion into fp32: n elements at x, written at out + offset. widen_blocks
// fills the rest.
struct widen_tensor {
  const void* x = nullptr;
  std::int64_t n = 0;
  std::int64_t offset = 0;
  std::int64_t first_block = 0;  // the first block of the launch on this tensor
  int vectorised = 0;            // 16-byte loads and stores
};

// Several tensors of one type converted to fp32 into one buffer in one launch (a ZeRO unit's
// gradients into the buffer its reduce-scatter sums): widen_blocks fills the host table's
// first_block and vectorised fields for `out` and returns the block count; widen then runs on the
// table copied to device memory. The tensors' places in `out` do not overlap.
std::int64_t widen_blocks(dtype type, widen_tensor* tensors, int count, const float* out);
int widen(dtype type, const widen_tensor* device_tensors, int count, std::int64_t blocks, float* out,
          void* stream);

enum class norm_type { rms, layer };

// A norm over each row of (rows, cols), row-major, optionally after a residual add:
//   h = x, or h = x + residual rounded once to dtype (written to sum; residual and sum are both
//     null or both set);
//   layer: mean = Σh / cols, var = Σ(h - mean)² / cols, y = (h - mean) rstd w + b;
//   rms:   mean = 0,         var = Σh² / cols,           y = h rstd w;
//   rstd = 1 / sqrt(var + eps), written to rstd (rows fp32); mean (rows fp32) written for layer
//   only (may be null for rms). weight, bias (cols) dtype, or null for 1 and 0. Statistics and y
//   in fp32 from the dtype h, y rounded once.
int norm_forward(norm_type kind, dtype type, const void* x, const void* residual, void* sum,
                 const void* weight, const void* bias, void* y, float* mean, float* rstd,
                 std::int64_t rows, std::int64_t cols, float eps, void* stream);

// GELU's backward with a bias's gradient: grad_in (rows, cols) = grad_out * gelu_tanh'(h) (h: the
// tanh GELU's input; ATen's formula, in fp32, rounded once to dtype), and bias_grad (cols) = the
// column sums of grad_in as rounded (the gradient of a bias added before the GELU), summed in a
// fixed order in fp32 through scratch (norm_backward_scratch(rows, cols) elements) and rounded
// once, in the same pass: grad_in is not read again for its sums.
int gelu_tanh_backward(dtype type, const void* grad_out, const void* h, void* grad_in, void* bias_grad,
                       float* scratch, std::int64_t rows, std::int64_t cols, void* stream);

// The longest row the norm kernels take (one row per block, held in registers): 4096 groups of 16
// bytes where every row is 16-byte aligned and a multiple of 16 bytes long (vectorised), else
// 4096 elements. Longer rows: the launchers return cudaErrorInvalidValue.
std::int64_t norm_max_cols(dtype type, bool vectorised);

// fp32 elements of scratch norm_backward needs for the parameters' gradients of (rows, cols).
std::int64_t norm_backward_scratch(std::int64_t rows, std::int64_t cols);

// The gradients of norm_forward from grad_y (rows, cols): with g = grad_y w, xhat = (h - mean) rstd,
//   grad_h = rstd (g - mean(g) - xhat mean(g xhat)) (rms: without mean(g)), plus grad_sum (rows,
//     cols, the gradient h gets from its other uses) where not null; written to grad_h, a buffer
//     of its own (for a residual add it is also x's and residual's gradient);
//   grad_weight = Σ_rows grad_y xhat, grad_bias = Σ_rows grad_y, (cols) dtype, each where not null,
//     summed in a fixed order in fp32 (the same value on every run) through scratch; for rows of
//     up to 4096 elements in the same pass as grad_h (grad_y and h read once), in an order that
//     follows the device's multiprocessor count (the same on every run on one kind of GPU).
// h: the forward's normed input (its sum, or x); mean (layer) and rstd as the forward wrote them.
int norm_backward(norm_type kind, dtype type, const void* grad_y, const void* h, const void* weight,
                  const float* mean, const float* rstd, const void* grad_sum, void* grad_h,
                  void* grad_weight, void* grad_bias, float* scratch, std::int64_t rows,
                  std::int64_t cols, void* stream);

// The sums of the columns of x (rows, cols), row-major: out (cols) = Σ_rows x, accumulated in fp32
// in a fixed order (the same value on every run), rounded once to dtype. scratch: fp32 of
// norm_backward_scratch(rows, cols) elements. A bias's gradient in one pass over its output's
// gradient.
int column_sum(dtype type, const void* x, void* out, float* scratch, std::int64_t rows, std::int64_t cols,
               void* stream);

}  // namespace cohort::core::model::kernels

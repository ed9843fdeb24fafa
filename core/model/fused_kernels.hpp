// The decoder's own CUDA kernels (fused_kernels.cu, built with nvcc in the CUDA build only):
// rotary embedding and SwiGLU, each one kernel forward and one backward where ATen runs five to
// eight elementwise kernels, and the LM head's cross-entropy with its gradient in one kernel. Torch-free: raw device pointers, element counts and a stream, so
// that nvcc never compiles a libtorch header. fused_ops.hpp is the torch-level interface.
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

// Rotary embedding, Llama's rotate_half pairing (i with i + head_dim/2), over a row-major
// (rows, cols) tensor whose first rot_cols columns are heads of head_dim (q's and k's heads of a
// fused q/k/v projection); columns rot_cols..cols are copied unchanged (v). Row r is position
// r % seq_len, and cos/sin are (seq_len, head_dim) fp32, row-major.
// forward:  y_i = x_i cos_i - x_{i+h} sin_i,   y_{i+h} = x_{i+h} cos_{i+h} + x_i sin_{i+h}
// backward: the transpose of that map applied to the output's gradient:
//           dx_i = g_i cos_i + g_{i+h} sin_{i+h},  dx_{i+h} = g_{i+h} cos_{i+h} - g_i sin_i
// head_dim even, rot_cols a multiple of head_dim, rot_cols <= cols.
int rotary_half(direction dir, dtype type, const void* in, void* out, const float* cos,
                const float* sin, std::int64_t rows, std::int64_t cols, std::int64_t rot_cols,
                std::int64_t head_dim, std::int64_t seq_len, void* stream);

// SwiGLU over gate_up (rows, 2 * inner), row-major, gate in the first half of each row and up in
// the second: out (rows, inner) = silu(gate) * up.
int swiglu_forward(dtype type, const void* gate_up, void* out, std::int64_t rows,
                   std::int64_t inner, void* stream);
// Its backward: grad_gate_up (rows, 2 * inner) from grad_out (rows, inner) and the forward's
// gate_up: d gate = g * up * silu'(gate), d up = g * silu(gate).
int swiglu_backward(dtype type, const void* grad_out, const void* gate_up, void* grad_gate_up,
                    std::int64_t rows, std::int64_t inner, void* stream);

// Cross-entropy of each row of logits (rows, cols), row-major, against its target, and the
// gradient of their sum, in one kernel with two passes over each row (where ATen casts to fp32,
// runs log-softmax, NLL, their two backwards and a cast back: about 40 bytes of traffic per logit
// against 6 here). One block per row; fp32 math from the dtype logits.
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

}  // namespace cohort::core::model::kernels

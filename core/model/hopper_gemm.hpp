// cohort's own GEMM for Hopper (sm_90: H100, H200), with a Llama MLP's SwiGLU and attention's
// rotary embedding in its epilogues:
//  - the gate/up projection writes gate | up and h = silu(gate) up in one kernel, where cuBLAS's
//    GEMM and the SwiGLU kernel after it read gate | up back from memory;
//  - the down projection's input gradient dh becomes d gate | d up in the same kernel, where
//    cuBLAS's GEMM writes dh and the SwiGLU backward kernel reads it back with gate | up;
//  - the q/k/v projection writes q and k turned by rotary, and v, apart, where cuBLAS's GEMM
//    writes q | k | v and the rotary kernel reads it back.
// At the 1.1B shape (16,384 tokens, 2,048 hidden, 5,632 inner) on an H200, alone
// (benchmarks/gpu/swiglu_gemm.cu): the GEMM alone at cuBLAS's rate (680-700 TFLOP/s), the forward
// 1.13-1.15 ms against cuBLAS + SwiGLU's 1.27-1.30, the backward 0.67 ms against 1.01-1.03. Through
// a training job (swiglu_mlp_function, decoder.cpp) 2.5% more tokens/s on one GPU, 2.7-3.5% under
// ZeRO-3 on two. The q/k/v projection with rotary (benchmarks/gpu/rotary_gemm.cu): 265-268 us
// against the own GEMM and the rotary kernel's 308 (cuBLAS's and the rotary kernel's 316-319);
// through a job (rotary_qkv_function) on one GPU 0.5-0.8% more tokens/s on one machine, nothing
// beyond the runs' spread on another.
//
// The kernel: TMA loads of x's and the weights' tiles into stages of shared memory, two consumer
// warpgroups each multiplying 64 rows of a 128 x 256 tile with wgmma (m64n256k16, fp32
// accumulators), a persistent grid of one block a multiprocessor, tiles in groups of 16 along the
// rows for L2. A consumer writes its result to shared memory and goes on to its next tile; store
// warps do the epilogue's work and send the result out by TMA: a warp for each consumer, or, for
// SwiGLU's backward, three for both. Three stages of 64 k-steps; SwiGLU's backward, which reads
// gate | up in by TMA two pieces ahead, has four of 32.
//
// Contract, for every launcher (torch-free, as fused_kernels.hpp):
//  - bf16 operands and outputs, row-major: x (rows, k); the weights (cols, k), or (k, cols) for
//    the down projection, with their rows `weight_stride` elements apart; outputs contiguous.
//    Pointers 16-byte aligned, strides multiples of 8 elements. Accumulation in fp32, each
//    output rounded once to bf16.
//  - The shapes are whole tiles: rows % 128 == 0, k % 64 == 0, and the output's columns a
//    multiple of 256 (with SwiGLU 2 inner: a tile is 128 columns of gate and the same of up);
//    hopper_gemm_fits says so.
//  - The launch is asynchronous on `stream` (a cudaStream_t as void*), allocates nothing, can be
//    captured in a CUDA graph, and is deterministic: the same inputs give the same bits.
//  - Returns a cudaError_t as an int (0 = success); cudaErrorNotSupported where this build has no
//    kernel or the device is not compute capability 9.0.
#pragma once

#include <cstdint>

namespace cohort::core::model::kernels {

// Whether this build has the kernel and `device` runs it (compute capability 9.0).
bool hopper_gemm_available(int device);

// Whether rows x k by cols x k is whole tiles: for SwiGLU cols is 2 inner.
bool hopper_gemm_fits(std::int64_t rows, std::int64_t cols, std::int64_t k);

// out (rows, cols) = x weightᵀ.
int hopper_linear(const void* x, const void* weight, std::int64_t weight_stride, void* out, std::int64_t rows,
                  std::int64_t cols, std::int64_t k, void* stream);

// gate_up (rows, 2 inner) = x [gate; up]ᵀ, gate's columns first, and h (rows, inner) =
// silu(g) u of the bf16-rounded g and u (swiglu_math.cuh: the formula of fused_kernels'
// swiglu_forward). gate and up (inner, k) each, their rows `weight_stride` apart.
int hopper_linear_swiglu(const void* x, const void* gate, const void* up, std::int64_t weight_stride,
                         void* gate_up, void* h, std::int64_t rows, std::int64_t inner, std::int64_t k,
                         void* stream);

// SwiGLU's backward through the down projection in one kernel: dh = grad_y down (the down
// projection's input gradient, not written) and from it and the forward's gate_up (rows,
// 2 inner), grad_gate_up (rows, 2 inner) = d gate | d up as fused_kernels' swiglu_backward
// computes them from the bf16 dh. grad_y (rows, hidden); down (hidden, inner), its rows
// `down_stride` apart. Needs inner % 256 == 0 (hopper_gemm_fits(rows, inner, hidden)).
int hopper_swiglu_input_grad(const void* grad_y, const void* down, std::int64_t down_stride,
                             const void* gate_up, void* grad_gate_up, std::int64_t rows, std::int64_t inner,
                             std::int64_t hidden, void* stream);

// The columns of a q/k/v projection: q's heads, k's, v's.
struct qkv_columns {
  std::int64_t q = 0, k = 0, v = 0;
};
// Its outputs apart: q (rows, cols.q), k (rows, cols.k), v (rows, cols.v), each contiguous.
struct qkv_outputs {
  void* q = nullptr;
  void* k = nullptr;
  void* v = nullptr;
  qkv_columns cols;
};
// Rotary's tables: cos and sin (seq_len, head_dim) fp32, row-major, 16-byte aligned; row r of x
// is position r % seq_len (fused_kernels.hpp's rotary_half).
struct rotary_tables {
  const float* cos = nullptr;
  const float* sin = nullptr;
  std::int64_t seq_len = 0, head_dim = 0;
};

// Whether the rotary launcher takes these: head_dim a multiple of 16 that divides 256, q's and
// k's columns multiples of head_dim, each part's a multiple of 64, and the whole product
// (rows x (q + k + v) by k) whole tiles.
bool hopper_rotary_fits(std::int64_t rows, const qkv_columns& cols, std::int64_t k, std::int64_t head_dim);

// The q/k/v projection with rotary in one kernel: the product x weightᵀ (weight: the q, k and v
// rows stacked, (q + k + v, k), rows `weight_stride` apart), written apart into q, k and v, with
// q's and k's heads turned as fused_kernels' rotary_half forward turns the bf16 product (the same
// bits: rotary_math.cuh) and v as it is.
int hopper_linear_rotary(const void* x, const void* weight, std::int64_t weight_stride,
                         const qkv_outputs& out, const rotary_tables& tables, std::int64_t rows,
                         std::int64_t k, void* stream);

}  // namespace cohort::core::model::kernels

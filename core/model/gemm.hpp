// The fused path's GEMMs, each shape's cuBLASLt algorithm picked by timing its candidates.
//
// cuBLAS picks a kernel for a GEMM from a heuristic. A GPU that runs at its power limit (an H200
// training step does, at about 1.5 GHz of its 1.98) can be faster with another of cuBLASLt's
// candidates: at the 1.1B shape, run alone for seconds, the LM head's chunks, the gate/up
// projection's forward and the down projection's input gradient ran 4-8% faster so. Through the
// product the timed picks made GPT-2 124M's step on one GPU 2% faster, left the 1.1B's on one GPU
// as it was, and made ZeRO-3 on 2 GPUs (where NCCL's kernels share the multiprocessors with the
// GEMMs, which the timing alone does not see) 0.6-1.1% slower at the 7B shape.
//
// The contract:
//  - mm_into / mm / linear compute what at::mm_out / at::mm / at::linear compute, within the
//    rounding of another summation order; a CUDA product of bf16 or fp16 operands can be written
//    to an fp32 `out` (accumulated in fp32 in the GEMM), as compat::matmul_into does.
//  - Timed picks are off unless set_timed_picks(true): the causal-LM training engine turns them
//    on for a job of one rank, off for more. Off, ATen computes every product, as before.
//  - With them on, on CUDA, with bf16 or fp16 operands whose rows or columns are contiguous, the
//    product goes through cuBLASLt. The first product of a shape (the operands' sizes, strides, types and
//    alignments, accumulation, bias) on a device times cuBLASLt's candidates (up to 8 offered for
//    no workspace, run without one, and up to 8 offered for torch's, run with it), in turns after
//    a warm-up so that each meets the same clock, and keeps for the process the heuristic's first
//    for no workspace unless another ran at least 2% faster (the fastest then). Given a
//    workspace, most algorithms take a counter in it that cuBLASLt zeroes with a memset before
//    every product (a graph node and about 2 µs of idle); without one they schedule statically.
//    That first call waits for the device, about 0.2 s; later ones do not. While a CUDA graph is
//    being captured, a shape not yet timed takes the heuristic's first for no workspace and is
//    timed later.
//  - Elsewhere (the CPU, fp32 operands, other strides), and in deterministic runs
//    (at::globalContext().deterministicAlgorithms(), where a pick by timing could differ from
//    process to process), ATen computes it.
#pragma once

#include <torch/torch.h>

namespace cohort::core::model::gemm {

// out (M, N) = a (M, K) · b (K, N) [+ bias (N), broadcast over rows] [+ out when accumulate].
// out has a's dtype, or fp32 for bf16/fp16 operands on CUDA. No bias with accumulate. cuBLASLt
// takes it where out's rows are contiguous and a bias is contiguous in out's dtype.
void mm_into(const torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
             bool accumulate = false, const torch::Tensor& bias = {});

// a (M, K) · b (K, N) as a new (M, N) tensor in a's dtype.
torch::Tensor mm(const torch::Tensor& a, const torch::Tensor& b);

// x (..., in) · weightᵀ [+ bias], weight (out, in): (..., out) in x's dtype, as torch::linear.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

// Whether products on CUDA go through cuBLASLt with timed picks (above), for the whole process.
void set_timed_picks(bool on);
bool timed_picks();

// Whether a Llama MLP on the fused path may run through cohort's own Hopper GEMM with SwiGLU in
// its epilogues (hopper_gemm.hpp; swiglu_mlp_function in decoder.cpp), and attention's q/k/v with
// rotary (own_gemm_rotary below), for the whole process. Off unless set_own_gemm(true): the
// causal-LM training engine turns it on for its jobs, of one rank or many. Deterministic runs
// never take it (its tiles are fixed, but it is not ATen's).
void set_own_gemm(bool on);
bool own_gemm();
// Whether, where the own GEMM is on, attention's q/k/v projection runs in it too, with Llama's
// rotary in its epilogue (rotary_qkv_function in decoder.cpp), for the whole process. On unless
// set_own_gemm_rotary(false): the baseline of a measurement.
void set_own_gemm_rotary(bool on);
bool own_gemm_rotary();

// Shapes timed so far in this process (over every device), and of them those given another
// algorithm than the heuristic's first: for tests and logs.
struct tuning_counts {
  int timed = 0;
  int replaced = 0;
};
tuning_counts tuning();

}  // namespace cohort::core::model::gemm

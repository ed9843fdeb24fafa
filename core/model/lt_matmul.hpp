// Row-major GEMMs on CUDA through cuBLASLt, with the epilogues ATen's ops do not offer: the tanh
// GELU with its input kept beside the output, that GELU's gradient applied to a GEMM's result, and
// a bias's gradient summed inside the weight-gradient GEMM. Built only with the CUDA kernels
// (COHORT_WITH_CUDA_KERNELS); fused_ops.hpp's autograd functions are its users.
//
// Every matrix is a 2-D row-major CUDA tensor, contiguous, of one dtype (fp32, bf16 or fp16), on
// the current device; out = op(a) @ op(b) is (m, n), with op(a) (m, k) and op(b) (k, n), a and b
// stored transposed where the flags say so. Accumulation in fp32. The launch goes on the current
// stream (CUDA-graph capture included) with a workspace from the caching allocator.
#pragma once

#include <torch/torch.h>

namespace cohort::core::model::lt {

enum class epilogue {
  none,
  // out = gelu_tanh(op(a) @ op(b) + bias), aux = op(a) @ op(b) + bias (GELU's input, (m, n)).
  bias_gelu_aux,
  // out = (op(a) @ op(b)) * gelu_tanh'(aux), bias = Σ_rows out (n): the gradient of GELU's input
  // and of the bias added before it, from the gradient of GELU's output.
  dgelu_bias_grad,
  // out = op(a) @ op(b), bias = Σ_k op(b)[k, :] (n): a weight's gradient x^T dy with its bias's
  // gradient (dy's column sums) from the same reads of dy.
  b_sums,
  // out = op(a) @ op(b), bias = Σ_k op(a)[:, k] (m): the same where dy is op(a) (dy^T x).
  a_sums,
};

struct gemm {
  torch::Tensor a;
  bool a_transposed = false;  // a stored (k, m)
  torch::Tensor b;
  bool b_transposed = false;  // b stored (n, k)
  torch::Tensor out;          // (m, n), written
  epilogue ep = epilogue::none;
  torch::Tensor bias;  // (n) or, for a_sums, (m): read by bias_gelu_aux, written by the rest
  torch::Tensor aux;   // (m, n): written by bias_gelu_aux, read by dgelu_bias_grad
};

// Whether cuBLASLt has an algorithm on `device` for a GEMM of these sizes, layout, dtype and
// epilogue with 16-byte aligned operands (as the caching allocator's tensors are); the answer is
// kept per device, GEMM and alignment. False for a dtype other than fp32, bf16 and fp16.
bool supported(std::int64_t m, std::int64_t n, std::int64_t k, bool a_transposed, bool b_transposed,
               torch::ScalarType type, epilogue ep, const torch::Device& device);

// Runs g; throws std::invalid_argument when g's tensors do not fit the contract above, and
// std::runtime_error where cuBLASLt has no algorithm for it (ask supported first) or the launch
// fails.
void run(const gemm& g);

}  // namespace cohort::core::model::lt

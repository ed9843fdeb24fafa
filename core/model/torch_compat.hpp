// The one place that knows which libtorch it is built against: attention is the fused
// at::scaled_dot_product_attention on libtorch 2.x and an explicit equivalent on 1.13; the fused
// multi-tensor AdamW kernel exists on 2.x only, ATen's RMSNorm on 2.4 and later, GEMMs that
// accumulate bf16 products into fp32 on 2.9 and later.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>
#include <torch/version.h>

namespace cohort::core::model::compat {

// Softmax attention as transformers' eager path computes it: scores in the input dtype, softmax
// in fp32. q (B, H, T, D), k and v (B, H, S, D); mask (T, S) bool, true = may attend; an
// undefined mask means causal; dropout_p > 0 drops attention probabilities. Returns (B, H, T, D).
inline at::Tensor attention_math(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& mask, double scale, double dropout_p = 0.0) {
  at::Tensor allowed = mask.defined()
                           ? mask
                           : at::ones({q.size(2), k.size(2)}, q.options().dtype(at::kBool)).tril();
  at::Tensor w = at::matmul(q, k.transpose(-2, -1)) * scale;  // (B, H, T, S)
  w = w.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  w = at::softmax(w, -1, at::kFloat).to(q.scalar_type());
  if (dropout_p > 0.0) w = at::dropout(w, dropout_p, true);
  return at::matmul(w, v);
}

// attention_math's contract, except that k and v may have fewer heads, (B, H_kv, S, D) with H a
// multiple of H_kv: each key/value head serves H / H_kv consecutive query heads, as
// repeat_interleave(H / H_kv, 1) would give them. Fused kernels where the library has them; on
// libtorch 2.5 and later they read the shared heads in place (enable_gqa), with no repeated copy
// of k and v either way.
inline at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, double scale, double dropout_p = 0.0) {
  const std::int64_t groups = q.size(1) / k.size(1);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  const bool gqa = groups != 1;
  if (mask.defined())
    return at::scaled_dot_product_attention(q, k, v, mask, dropout_p, false, scale, gqa);
  return at::scaled_dot_product_attention(q, k, v, {}, dropout_p, true, scale, gqa);
#else
  const at::Tensor ks = groups == 1 ? k : k.repeat_interleave(groups, 1);
  const at::Tensor vs = groups == 1 ? v : v.repeat_interleave(groups, 1);
#if TORCH_VERSION_MAJOR >= 2
  if (mask.defined()) return at::scaled_dot_product_attention(q, ks, vs, mask, dropout_p, false, scale);
  return at::scaled_dot_product_attention(q, ks, vs, {}, dropout_p, true, scale);
#else
  return attention_math(q, ks, vs, mask, scale, dropout_p);
#endif
#endif
}

// Makes GPU results the same run to run, at a cost in speed: torch's deterministic algorithms
// (warning where an op has none) and attention by the math path, since the fused flash and
// memory-efficient kernels accumulate their backward with atomics. For the whole process.
inline void use_deterministic_algorithms() {
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
#if TORCH_VERSION_MAJOR >= 2
  at::globalContext().setSDPUseFlash(false);
  at::globalContext().setSDPUseMemEfficient(false);
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 4
  at::globalContext().setSDPUseCuDNN(false);
#endif
#endif
}

// Whether rms_norm() can run: ATen's RMSNorm (libtorch 2.4 and later; a fused kernel on CUDA).
constexpr bool has_rms_norm =
    TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4);

// x * rsqrt(mean(x², -1) + eps) * weight over the last dimension, accumulated in fp32 and
// returned in x's dtype; an undefined weight multiplies by nothing. Only where has_rms_norm.
inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  std::optional<at::Tensor> w;
  if (weight.defined()) w = weight;
  return at::rms_norm(x, {x.size(-1)}, w, eps);
#else
  (void)x, (void)weight, (void)eps;
  throw std::logic_error("rms_norm needs libtorch 2.4 or later (check has_rms_norm)");
#endif
}

// Whether fused_adamw() can run (libtorch 2.x).
constexpr bool has_fused_adamw = TORCH_VERSION_MAJOR >= 2;

// torch.optim.AdamW(fused=True)'s kernel over CUDA tensors: steps are the fp32 step counts after
// this step (torch.optim increments them first). Only where has_fused_adamw.
inline void fused_adamw(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                        const std::vector<at::Tensor>& exp_avgs,
                        const std::vector<at::Tensor>& exp_avg_sqs,
                        const std::vector<at::Tensor>& steps, double lr, double beta1, double beta2,
                        double weight_decay, double eps) {
#if TORCH_VERSION_MAJOR >= 2
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2, weight_decay,
                    eps, /*amsgrad=*/false, /*maximize=*/false);
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)steps, (void)lr, (void)beta1,
      (void)beta2, (void)weight_decay, (void)eps;
  throw std::logic_error("fused_adamw needs libtorch 2.x (check has_fused_adamw)");
#endif
}

// out = a · b, or out += a · b with `accumulate`, for out (m, n) and a (m, k), b (k, n) of one
// dtype, out of theirs or fp32. An fp32 out from bf16/fp16 a and b on CUDA (libtorch 2.9 and
// later) is the GEMM's own output, in fp32 as it accumulates; elsewhere the product is formed in
// a's dtype, then copied or added.
inline void matmul_into(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  if (out.scalar_type() == a.scalar_type() && !accumulate) {
    at::mm_out(out, a, b);
    return;
  }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
  if (out.is_cuda() && out.scalar_type() == at::kFloat &&
      (a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kHalf)) {
    if (accumulate) {
      at::addmm_out(out, out, a, b, at::kFloat);
    } else {
      at::mm_out(out, a, b, at::kFloat);
    }
    return;
  }
#endif
  if (accumulate) {
    out.add_(a.mm(b));
  } else {
    out.copy_(a.mm(b));
  }
}

}  // namespace cohort::core::model::compat

// AdamW and gradient clipping, step for step as torch/optim/adamw.py and nn/utils/clip_grad.py.
#include "core/model/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <stdexcept>
#include <string>

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/utils.h>

#include "core/model/torch_compat.hpp"

namespace cohort::core::model {

void adamw_step(torch::Tensor param, const torch::Tensor& grad, adamw_state& s,
                const adamw_options& o) {
  torch::NoGradGuard no_grad;
  if (!s.exp_avg.defined()) {
    s.exp_avg = torch::zeros_like(param);
    s.exp_avg_sq = torch::zeros_like(param);
  }
  ++s.step;
  param.mul_(1.0 - o.lr * o.weight_decay);
  s.exp_avg.lerp_(grad, 1.0 - o.beta1);
  s.exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1.0 - o.beta2);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(s.step));
  const double step_size = o.lr / bias_correction1;
  auto denom = (s.exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(o.eps);
  param.addcdiv_(s.exp_avg, denom, -step_size);
}

namespace {

void check_host_fp32(const torch::Tensor& t, const char* what) {
  if (!t.defined() || t.device().type() != torch::kCPU || t.scalar_type() != torch::kFloat ||
      !t.is_contiguous())
    throw std::invalid_argument(std::string("adamw_step_host: ") + what +
                                " must be a contiguous fp32 CPU tensor");
}

// Elements per task of the host loops; also the chunk of host_square_sum's fixed partial sums.
constexpr std::int64_t host_grain = std::int64_t{1} << 16;

// adamw_step_host's operands and its scalars as torch's CPU kernels use them (each converted to
// fp32 once), for adamw_step's order of operations: mul_, lerp_ (weight < 0.5: m + w·(g − m)),
// mul_ + addcmul_, sqrt / sqrt(bc2) + eps, addcdiv_ (p + (−step_size·m) / denom).
struct host_adamw {
  float* p;
  const float* g;
  float* m;
  float* v;
  float scale, decay, w1, beta2, w2, root_bc2, eps, neg_step;
  bool lerp_from_start;  // lerp's two formulas, as ATen picks them
};

host_adamw host_constants(const adamw_options& o, std::int64_t step, double grad_scale, float* p,
                          const float* g, float* m, float* v) {
  const double bias_correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  const float w1 = static_cast<float>(1.0 - o.beta1);
  return host_adamw{p,
                    g,
                    m,
                    v,
                    static_cast<float>(grad_scale),  // x · 1 is x: no branch for an unscaled gradient
                    static_cast<float>(1.0 - o.lr * o.weight_decay),
                    w1,
                    static_cast<float>(o.beta2),
                    static_cast<float>(1.0 - o.beta2),
                    static_cast<float>(std::sqrt(bias_correction2)),
                    static_cast<float>(o.eps),
                    static_cast<float>(-(o.lr / bias_correction1)),
                    std::abs(w1) < 0.5f};
}

// c10::BFloat16's conversion (round to nearest even; any NaN to 0x7FC0), branch-free so that it
// vectorises.
inline __attribute__((always_inline)) std::uint16_t to_bf16_bits(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const std::uint32_t rounded = (bits + (((bits >> 16) & 1u) + 0x7FFFu)) >> 16;
  return x != x ? std::uint16_t{0x7FC0} : static_cast<std::uint16_t>(rounded);
}

// The loops over [begin, end), one per kind of copy, each compiled for AVX-512, AVX2 and the
// baseline and picked for the machine at load time (the same IEEE operations in the same order in
// each: the same bits; this file is built without fused multiply-adds). The operands are local
// restrict pointers, so that the compiler knows they do not overlap and vectorises.
#define COHORT_HOST_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define COHORT_ADAMW_LOOP(STORE_COPY)                                                            \
  float* __restrict p = a.p;                                                                     \
  const float* __restrict g = a.g;                                                               \
  float* __restrict m = a.m;                                                                     \
  float* __restrict v = a.v;                                                                     \
  const float scale = a.scale, decay = a.decay, w1 = a.w1, beta2 = a.beta2, w2 = a.w2;           \
  const float root_bc2 = a.root_bc2, eps = a.eps, neg_step = a.neg_step;                         \
  const bool lerp_from_start = a.lerp_from_start;                                                \
  for (std::int64_t i = begin; i < end; ++i) {                                                   \
    const float gi = g[i] * scale;                                                               \
    const float mi = lerp_from_start ? m[i] + w1 * (gi - m[i]) : gi - (gi - m[i]) * (1.0f - w1); \
    const float vi = v[i] * beta2 + w2 * gi * gi;                                                \
    const float denom = std::sqrt(vi) / root_bc2 + eps;                                          \
    const float pi = p[i] * decay + neg_step * mi / denom;                                       \
    m[i] = mi;                                                                                   \
    v[i] = vi;                                                                                   \
    p[i] = pi;                                                                                   \
    STORE_COPY;                                                                                  \
  }
// The loops' bodies are the macro's.
// clang-format off
COHORT_HOST_CLONES void adamw_span(const host_adamw& a, std::int64_t begin, std::int64_t end) {
  COHORT_ADAMW_LOOP((void)0)
}
COHORT_HOST_CLONES void adamw_span_bf16(const host_adamw& a, std::int64_t begin, std::int64_t end,
                                        std::uint16_t* __restrict copy) {
  COHORT_ADAMW_LOOP(copy[i] = to_bf16_bits(pi))
}
COHORT_HOST_CLONES void adamw_span_f32(const host_adamw& a, std::int64_t begin, std::int64_t end,
                                       float* __restrict copy) {
  COHORT_ADAMW_LOOP(copy[i] = pi)
}
// clang-format on
#undef COHORT_ADAMW_LOOP

// The squares of x[begin, end) summed in fp64 in eight running sums (element begin + k into sum
// k % 8), added in order at the end: independent sums that vectorise, in a fixed order, so a
// fixed value (each square of a float is exact in fp64).
COHORT_HOST_CLONES double square_sum_span(const float* __restrict x, std::int64_t begin, std::int64_t end) {
  constexpr int lanes = 8;
  double acc[lanes] = {};
  std::int64_t i = begin;
  for (; i + lanes <= end; i += lanes)
    for (int k = 0; k < lanes; ++k) acc[k] += static_cast<double>(x[i + k]) * x[i + k];
  for (int k = 0; i < end; ++i, ++k) acc[k] += static_cast<double>(x[i]) * x[i];
  double sum = 0;
  for (double a : acc) sum += a;
  return sum;
}
#undef COHORT_HOST_CLONES

}  // namespace

void adamw_step_host(torch::Tensor param, const torch::Tensor& grad, adamw_state& s,
                     const adamw_options& o, double grad_scale, torch::Tensor copy) {
  check_host_fp32(param, "param");
  check_host_fp32(grad, "grad");
  const std::int64_t n = param.numel();
  if (grad.numel() != n)
    throw std::invalid_argument("adamw_step_host: grad has " + std::to_string(grad.numel()) +
                                " elements, param " + std::to_string(n));
  if (copy.defined() && (copy.numel() != n || !copy.is_contiguous() || copy.device().type() != torch::kCPU ||
                         (copy.scalar_type() != torch::kBFloat16 && copy.scalar_type() != torch::kFloat)))
    throw std::invalid_argument("adamw_step_host: copy must be a contiguous bf16 or fp32 CPU tensor of " +
                                std::to_string(n) + " elements");
  if (!s.exp_avg.defined()) {  // first touched by the threads that update them
    s.exp_avg = torch::empty_like(param);
    s.exp_avg_sq = torch::empty_like(param);
    host_zero(s.exp_avg);
    host_zero(s.exp_avg_sq);
  }
  check_host_fp32(s.exp_avg, "exp_avg");
  check_host_fp32(s.exp_avg_sq, "exp_avg_sq");
  ++s.step;
  const host_adamw a = host_constants(o, s.step, grad_scale, param.data_ptr<float>(), grad.data_ptr<float>(),
                                      s.exp_avg.data_ptr<float>(), s.exp_avg_sq.data_ptr<float>());
  std::uint16_t* copy_bf16 = copy.defined() && copy.scalar_type() == torch::kBFloat16
                                 ? reinterpret_cast<std::uint16_t*>(copy.data_ptr<c10::BFloat16>())
                                 : nullptr;
  float* copy_f32 = copy.defined() && copy.scalar_type() == torch::kFloat ? copy.data_ptr<float>() : nullptr;
  at::parallel_for(0, n, host_grain, [&](std::int64_t begin, std::int64_t end) {
    if (copy_bf16) {
      adamw_span_bf16(a, begin, end, copy_bf16);
    } else if (copy_f32) {
      adamw_span_f32(a, begin, end, copy_f32);
    } else {
      adamw_span(a, begin, end);
    }
  });
}

void host_zero(torch::Tensor t) {
  if (!t.defined() || t.device().type() != torch::kCPU || !t.is_contiguous())
    throw std::invalid_argument("host_zero: expects a contiguous CPU tensor");
  auto* bytes = static_cast<char*>(t.data_ptr());
  const auto size = static_cast<std::int64_t>(t.element_size());
  at::parallel_for(0, t.numel(), host_grain, [&](std::int64_t begin, std::int64_t end) {
    std::memset(bytes + begin * size, 0, static_cast<std::size_t>((end - begin) * size));
  });
}

double host_square_sum(const torch::Tensor& t) {
  if (!t.defined() || t.device().type() != torch::kCPU || t.scalar_type() != torch::kFloat ||
      !t.is_contiguous())
    throw std::invalid_argument("host_square_sum: expects a contiguous fp32 CPU tensor");
  const std::int64_t n = t.numel();
  const std::int64_t chunks = (n + host_grain - 1) / host_grain;
  std::vector<double> partial(static_cast<std::size_t>(chunks), 0.0);
  const float* x = t.data_ptr<float>();
  at::parallel_for(0, chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c)
      partial[static_cast<std::size_t>(c)] =
          square_sum_span(x, c * host_grain, std::min(n, (c + 1) * host_grain));
  });
  double sum = 0;
  for (double s : partial) sum += s;
  return sum;
}

void adamw_step_many(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                     const std::vector<adamw_state*>& states, const adamw_options& o) {
  if (params.size() != grads.size() || params.size() != states.size())
    throw std::invalid_argument("adamw_step_many: " + std::to_string(params.size()) + " params, " +
                                std::to_string(grads.size()) + " grads and " +
                                std::to_string(states.size()) + " states; they must pair up");
  if (params.empty()) return;
  if (!compat::has_fused_adamw || !params.front().is_cuda()) {
    for (std::size_t i = 0; i < params.size(); ++i) adamw_step(params[i], grads[i], *states[i], o);
    return;
  }
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> exp_avgs, exp_avg_sqs, steps;
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto& s = *states[i];
    if (!s.exp_avg.defined()) {
      s.exp_avg = torch::zeros_like(params[i]);
      s.exp_avg_sq = torch::zeros_like(params[i]);
    }
    ++s.step;
    exp_avgs.push_back(s.exp_avg);
    exp_avg_sqs.push_back(s.exp_avg_sq);
    steps.push_back(torch::full({}, static_cast<double>(s.step), params[i].options().dtype(torch::kFloat)));
  }
  compat::fused_adamw(params, grads, exp_avgs, exp_avg_sqs, steps, o.lr, o.beta1, o.beta2,
                      o.weight_decay, o.eps);
}

double grad_square_sum(const std::vector<torch::Tensor>& grads) {
  double sum = 0.0;
  for (const auto& g : grads) {
    if (g.defined()) sum += g.to(torch::kDouble).pow(2).sum().item<double>();
  }
  return sum;
}

double clip_coefficient(double total_norm, double max_norm) {
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

torch::Tensor clip_coefficient(const torch::Tensor& square_sum, double max_norm) {
  const auto norm = square_sum.to(torch::kDouble).reshape({}).sqrt();
  const auto coef = torch::full_like(norm, max_norm) / (norm + 1e-6);
  return torch::where(coef < 1.0, coef, torch::ones_like(coef));  // std::min(1.0, coef)
}

double clip_grad_norm(const std::vector<torch::Tensor>& grads, double max_norm) {
  const double total = std::sqrt(grad_square_sum(grads));
  const double coef = clip_coefficient(total, max_norm);
  torch::NoGradGuard no_grad;
  for (auto g : grads) {
    if (g.defined()) g.mul_(coef);
  }
  return total;
}

}  // namespace cohort::core::model

// AdamW and gradient clipping, step for step as torch/optim/adamw.py and nn/utils/clip_grad.py.
#include "core/model/adamw.hpp"

#include <algorithm>
#include <cmath>

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
  if (!s.exp_avg.defined()) {
    s.exp_avg = torch::zeros_like(param);
    s.exp_avg_sq = torch::zeros_like(param);
  }
  check_host_fp32(s.exp_avg, "exp_avg");
  check_host_fp32(s.exp_avg_sq, "exp_avg_sq");
  ++s.step;
  // The scalars as torch's CPU kernels use them (each converted to fp32 once), in adamw_step's
  // order of operations: mul_, lerp_ (weight < 0.5: m + w·(g − m)), mul_ + addcmul_,
  // sqrt / sqrt(bc2) + eps, addcdiv_ (p + (−step_size·m) / denom).
  const double bias_correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(s.step));
  const float decay = static_cast<float>(1.0 - o.lr * o.weight_decay);
  const float w1 = static_cast<float>(1.0 - o.beta1);
  const bool lerp_from_start = std::abs(w1) < 0.5f;  // lerp's two formulas, as ATen picks them
  const float beta2 = static_cast<float>(o.beta2), w2 = static_cast<float>(1.0 - o.beta2);
  const float root_bc2 = static_cast<float>(std::sqrt(bias_correction2));
  const float eps = static_cast<float>(o.eps);
  const float neg_step = static_cast<float>(-(o.lr / bias_correction1));
  const float scale = static_cast<float>(grad_scale);
  const bool scaled = grad_scale != 1.0;
  float* __restrict p = param.data_ptr<float>();
  const float* __restrict g = grad.data_ptr<float>();
  float* __restrict m = s.exp_avg.data_ptr<float>();
  float* __restrict v = s.exp_avg_sq.data_ptr<float>();
  c10::BFloat16* copy_bf16 = copy.defined() && copy.scalar_type() == torch::kBFloat16
                                 ? copy.data_ptr<c10::BFloat16>() : nullptr;
  float* copy_f32 = copy.defined() && copy.scalar_type() == torch::kFloat ? copy.data_ptr<float>() : nullptr;
  at::parallel_for(0, n, host_grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float gi = scaled ? g[i] * scale : g[i];
      const float mi = lerp_from_start ? m[i] + w1 * (gi - m[i]) : gi - (gi - m[i]) * (1.0f - w1);
      const float vi = v[i] * beta2 + w2 * gi * gi;
      const float denom = std::sqrt(vi) / root_bc2 + eps;
      const float pi = p[i] * decay + neg_step * mi / denom;
      m[i] = mi;
      v[i] = vi;
      p[i] = pi;
    }
    if (copy_bf16)
      for (std::int64_t i = begin; i < end; ++i) copy_bf16[i] = c10::BFloat16(p[i]);
    if (copy_f32)
      for (std::int64_t i = begin; i < end; ++i) copy_f32[i] = p[i];
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
    for (std::int64_t c = begin; c < end; ++c) {
      double sum = 0;
      for (std::int64_t i = c * host_grain, e = std::min(n, i + host_grain); i < e; ++i)
        sum += static_cast<double>(x[i]) * x[i];
      partial[static_cast<std::size_t>(c)] = sum;
    }
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

// AdamW and gradient clipping, step for step as torch/optim/adamw.py and nn/utils/clip_grad.py.
#include "core/model/adamw.hpp"

#include <algorithm>
#include <cmath>

#include <stdexcept>
#include <string>

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

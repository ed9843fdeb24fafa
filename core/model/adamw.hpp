// torch.optim.AdamW and torch.nn.utils.clip_grad_norm_ as plain functions over tensors, so the
// training engine can run them on any shard of a parameter (ZeRO) with its own state.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace cohort::core::model {

struct adamw_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// Per-parameter (or per-shard) state; created on the first step like torch's lazy state.
struct adamw_state {
  torch::Tensor exp_avg;     // like param
  torch::Tensor exp_avg_sq;  // like param
  std::int64_t step = 0;
};

// One AdamW update of `param` in place, as torch.optim.AdamW (single-tensor path): decoupled
// weight decay param *= 1 - lr * wd on every parameter, then the bias-corrected Adam step.
void adamw_step(torch::Tensor param, const torch::Tensor& grad, adamw_state& state,
                const adamw_options& options);

// adamw_step on each params[i] with grads[i] and *states[i]: on CUDA tensors with libtorch 2.x as
// one fused kernel (torch.optim.AdamW(fused=True)), equal to the loop within fp32 rounding.
void adamw_step_many(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                     const std::vector<adamw_state*>& states, const adamw_options& options);

// Sum of squares of all gradients (fp64 accumulation); a sharded engine all-reduces this.
double grad_square_sum(const std::vector<torch::Tensor>& grads);
// clip_grad_norm_'s factor: min(1, max_norm / (total_norm + 1e-6)).
double clip_coefficient(double total_norm, double max_norm);
// clip_grad_norm_: scales the gradients in place and returns the total L2 norm before clipping.
double clip_grad_norm(const std::vector<torch::Tensor>& grads, double max_norm);

}  // namespace cohort::core::model

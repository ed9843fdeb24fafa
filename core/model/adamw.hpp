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

// adamw_step for fp32 CPU tensors in one pass over memory, as DeepSpeed's CPU Adam: the gradient
// is multiplied by grad_scale as it is read (clipping without a pass of its own; grad is not
// written), and when `copy` is defined (bf16 or fp32, param's numel, contiguous) the updated
// parameter is also written there (the compute-dtype copy that gathers read). Element for element
// the same arithmetic as adamw_step in fp32, so the result does not depend on the thread count;
// parallel over at::parallel_for's threads. param, grad and the state must be contiguous fp32 on
// the CPU (std::invalid_argument otherwise). Used for optimizer offload, where the update of a
// 7B model's shard is the step's critical path.
void adamw_step_host(torch::Tensor param, const torch::Tensor& grad, adamw_state& state,
                     const adamw_options& options, double grad_scale, torch::Tensor copy);

// Zeroes a contiguous CPU tensor in parallel, split over threads as adamw_step_host splits its
// elements: on a machine of several NUMA nodes, memory touched first here lies where the same
// thread's part of the update will read it.
void host_zero(torch::Tensor t);

// Sum of squares of a contiguous fp32 CPU tensor in fp64, in parallel over fixed chunks whose
// partial sums are added in order: the same value on any thread count.
double host_square_sum(const torch::Tensor& t);

// adamw_step on each params[i] with grads[i] and *states[i]: on CUDA tensors with libtorch 2.x as
// one fused kernel (torch.optim.AdamW(fused=True)), equal to the loop within fp32 rounding.
void adamw_step_many(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                     const std::vector<adamw_state*>& states, const adamw_options& options);

// Sum of squares of all gradients (fp64 accumulation); a sharded engine all-reduces this.
double grad_square_sum(const std::vector<torch::Tensor>& grads);
// clip_grad_norm_'s factor: min(1, max_norm / (total_norm + 1e-6)).
double clip_coefficient(double total_norm, double max_norm);
// The same of sqrt(square_sum) (one fp64 element) as a 0-dim fp64 tensor on square_sum's device,
// computed there in double (bit for bit the value above; a NaN norm gives 1 as above): on a GPU
// the host does not wait for it.
torch::Tensor clip_coefficient(const torch::Tensor& square_sum, double max_norm);
// clip_grad_norm_: scales the gradients in place and returns the total L2 norm before clipping.
double clip_grad_norm(const std::vector<torch::Tensor>& grads, double max_norm);

}  // namespace cohort::core::model

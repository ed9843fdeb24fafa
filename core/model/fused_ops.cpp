// Autograd functions around the decoder's CUDA kernels (fused_ops.hpp); without the CUDA build
// they report themselves unavailable.
#include "core/model/fused_ops.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include <torch/autograd.h>

#ifdef COHORT_WITH_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "core/model/fused_kernels.hpp"
#endif

namespace cohort::core::model {

#ifdef COHORT_WITH_CUDA_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

kernels::dtype kernel_dtype(const torch::Tensor& x) {
  switch (x.scalar_type()) {
    case torch::kBFloat16:
      return kernels::dtype::bf16;
    case torch::kHalf:
      return kernels::dtype::f16;
    case torch::kFloat:
      return kernels::dtype::f32;
    default:
      break;
  }
  throw std::invalid_argument(std::string("fused kernels take fp32, bf16 or fp16 tensors, not ") +
                              c10::toString(x.scalar_type()));
}

void check_launch(int status, const char* op) {
  if (status != 0) {
    throw std::runtime_error(std::string(op) + ": CUDA launch failed: " +
                             cudaGetErrorString(static_cast<cudaError_t>(status)));
  }
}

void* current_stream(const torch::Tensor& x) {
  return static_cast<void*>(at::cuda::getCurrentCUDAStream(x.get_device()).stream());
}

// in (rows, cols) contiguous -> a new (rows, cols); cos/sin (T, head_dim) fp32 contiguous.
torch::Tensor run_rotary(kernels::direction dir, const torch::Tensor& in, const torch::Tensor& cos,
                         const torch::Tensor& sin, std::int64_t rot_cols, std::int64_t head_dim) {
  const c10::cuda::CUDAGuard guard(in.device());
  const std::int64_t cols = in.size(-1), rows = in.numel() / cols, seq_len = cos.size(0);
  auto out = torch::empty_like(in, torch::MemoryFormat::Contiguous);
  check_launch(kernels::rotary_half(dir, kernel_dtype(in), in.data_ptr(), out.data_ptr(),
                                    cos.data_ptr<float>(), sin.data_ptr<float>(), rows, cols,
                                    rot_cols, head_dim, seq_len, current_stream(in)),
               "fused_rotary_half");
  return out;
}

class rotary_function : public torch::autograd::Function<rotary_function> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv,
                               const torch::Tensor& cos, const torch::Tensor& sin,
                               std::int64_t rot_cols, std::int64_t head_dim) {
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["rot_cols"] = rot_cols;
    ctx->saved_data["head_dim"] = head_dim;
    return run_rotary(kernels::direction::forward, qkv, cos, sin, rot_cols, head_dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto grad = run_rotary(kernels::direction::backward, grads[0].contiguous(), saved[0], saved[1],
                           ctx->saved_data["rot_cols"].toInt(), ctx->saved_data["head_dim"].toInt());
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

class swiglu_function : public torch::autograd::Function<swiglu_function> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate_up) {
    const c10::cuda::CUDAGuard guard(gate_up.device());
    auto gu = gate_up.contiguous();
    const std::int64_t inner = gu.size(-1) / 2, rows = gu.numel() / gu.size(-1);
    auto sizes = gu.sizes().vec();
    sizes.back() = inner;
    auto out = torch::empty(sizes, gu.options());
    check_launch(kernels::swiglu_forward(kernel_dtype(gu), gu.data_ptr(), out.data_ptr(), rows,
                                         inner, current_stream(gu)),
                 "fused_swiglu");
    ctx->save_for_backward({gu});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto gu = ctx->get_saved_variables()[0];
    const c10::cuda::CUDAGuard guard(gu.device());
    auto grad_out = grads[0].contiguous();
    const std::int64_t inner = gu.size(-1) / 2, rows = gu.numel() / gu.size(-1);
    auto grad = torch::empty_like(gu, torch::MemoryFormat::Contiguous);
    check_launch(kernels::swiglu_backward(kernel_dtype(gu), grad_out.data_ptr(), gu.data_ptr(),
                                          grad.data_ptr(), rows, inner, current_stream(gu)),
                 "fused_swiglu backward");
    return {grad};
  }
};

}  // namespace

bool fused_kernels_available(const torch::Tensor& x) {
  const auto t = x.scalar_type();
  return x.is_cuda() && (t == torch::kFloat || t == torch::kBFloat16 || t == torch::kHalf);
}

torch::Tensor fused_rotary_half(const torch::Tensor& qkv, const torch::Tensor& cos,
                                const torch::Tensor& sin, std::int64_t rot_cols,
                                std::int64_t head_dim) {
  const std::int64_t T = qkv.size(-2);
  if (head_dim % 2 != 0 || rot_cols % head_dim != 0 || rot_cols > qkv.size(-1) ||
      cos.numel() != T * head_dim || sin.numel() != T * head_dim) {
    throw std::invalid_argument("fused_rotary_half: (B, T, cols) input with rot_cols a multiple of "
                                "an even head_dim and (T, head_dim) cos/sin expected");
  }
  // Rounded to the activations' dtype as transformers rounds them, then fp32 for the kernel.
  const auto prepare = [&](const torch::Tensor& t) {
    return t.to(qkv.scalar_type()).to(torch::kFloat).reshape({T, head_dim}).contiguous();
  };
  return rotary_function::apply(qkv.contiguous(), prepare(cos), prepare(sin), rot_cols, head_dim);
}

torch::Tensor fused_swiglu(const torch::Tensor& gate_up) {
  if (gate_up.size(-1) % 2 != 0) {
    throw std::invalid_argument("fused_swiglu: the last dimension holds gate and up: even size expected");
  }
  return swiglu_function::apply(gate_up);
}

torch::Tensor fused_cross_entropy(torch::Tensor& logits, const torch::Tensor& targets, bool want_grad) {
  if (logits.dim() != 2 || !logits.is_contiguous() || targets.dim() != 1 ||
      targets.size(0) != logits.size(0) || targets.scalar_type() != torch::kLong ||
      targets.device() != logits.device()) {
    throw std::invalid_argument("fused_cross_entropy: contiguous (n, V) logits and (n) int64 "
                                "targets on the same device expected");
  }
  const c10::cuda::CUDAGuard guard(logits.device());
  const auto t = targets.contiguous();
  auto rows = torch::empty({logits.size(0)}, logits.options().dtype(torch::kFloat));
  check_launch(kernels::cross_entropy(kernel_dtype(logits), logits.data_ptr(), t.data_ptr<std::int64_t>(),
                                      rows.data_ptr<float>(), want_grad ? logits.data_ptr() : nullptr,
                                      logits.size(0), logits.size(1), -100, current_stream(logits)),
               "fused_cross_entropy");
  return rows.sum();
}

void fused_adamw_step(torch::Tensor master, const torch::Tensor& grad, adamw_state& state,
                      const adamw_options& o, double grad_scale, const torch::Tensor& copy) {
  const auto same_place = [&](const torch::Tensor& t) {
    return t.defined() && t.is_contiguous() && t.device() == master.device() && t.numel() == master.numel();
  };
  if (!master.is_cuda() || master.scalar_type() != torch::kFloat || !master.is_contiguous())
    throw std::invalid_argument("fused_adamw_step: the master must be a contiguous fp32 CUDA tensor");
  if (!same_place(grad))
    throw std::invalid_argument("fused_adamw_step: the gradient must be contiguous, on the master's device, "
                                "with its " + std::to_string(master.numel()) + " elements");
  if (copy.defined() && !same_place(copy))
    throw std::invalid_argument("fused_adamw_step: the copy must be contiguous, on the master's device, "
                                "with its " + std::to_string(master.numel()) + " elements");
  torch::NoGradGuard no_grad;
  const c10::cuda::CUDAGuard guard(master.device());
  if (!state.exp_avg.defined()) {
    state.exp_avg = torch::zeros_like(master);
    state.exp_avg_sq = torch::zeros_like(master);
  }
  ++state.step;
  const double step = static_cast<double>(state.step);
  kernels::adamw_scalars s;
  s.lr = static_cast<float>(o.lr);
  s.beta1 = static_cast<float>(o.beta1);
  s.beta2 = static_cast<float>(o.beta2);
  s.eps = static_cast<float>(o.eps);
  s.weight_decay = static_cast<float>(o.weight_decay);
  s.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  s.step_size = static_cast<float>(o.lr / (1.0 - std::pow(o.beta1, step)));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, step)));
  s.grad_scale = static_cast<float>(grad_scale);
  check_launch(kernels::adamw(master.data_ptr<float>(), kernel_dtype(grad), grad.data_ptr(),
                              state.exp_avg.data_ptr<float>(), state.exp_avg_sq.data_ptr<float>(),
                              copy.defined() ? kernel_dtype(copy) : kernels::dtype::f32,
                              copy.defined() ? copy.data_ptr() : nullptr, master.numel(), s,
                              current_stream(master)),
               "fused_adamw_step");
}

torch::Tensor fused_square_sum(const torch::Tensor& x) {
  if (!x.is_cuda() || !x.is_contiguous())
    throw std::invalid_argument("fused_square_sum: a contiguous CUDA tensor expected");
  const c10::cuda::CUDAGuard guard(x.device());
  auto partials = torch::empty({kernels::square_sum_partials + 1}, x.options().dtype(torch::kDouble));
  auto out = partials.narrow(0, kernels::square_sum_partials, 1);
  check_launch(kernels::square_sum(kernel_dtype(x), x.data_ptr(), x.numel(), partials.data_ptr<double>(),
                                   out.data_ptr<double>(), current_stream(x)),
               "fused_square_sum");
  return out.squeeze(0);
}

#else

bool fused_kernels_available(const torch::Tensor&) { return false; }

torch::Tensor fused_cross_entropy(torch::Tensor&, const torch::Tensor&, bool) {
  throw std::logic_error("fused_cross_entropy: this build has no CUDA kernels (check fused_kernels_available)");
}

torch::Tensor fused_rotary_half(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                std::int64_t, std::int64_t) {
  throw std::logic_error("fused_rotary_half: this build has no CUDA kernels (check fused_kernels_available)");
}

torch::Tensor fused_swiglu(const torch::Tensor&) {
  throw std::logic_error("fused_swiglu: this build has no CUDA kernels (check fused_kernels_available)");
}

void fused_adamw_step(torch::Tensor, const torch::Tensor&, adamw_state&, const adamw_options&, double,
                      const torch::Tensor&) {
  throw std::logic_error("fused_adamw_step: this build has no CUDA kernels (check fused_kernels_available)");
}

torch::Tensor fused_square_sum(const torch::Tensor&) {
  throw std::logic_error("fused_square_sum: this build has no CUDA kernels (check fused_kernels_available)");
}

#endif

}  // namespace cohort::core::model

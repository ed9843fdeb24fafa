// Autograd functions around the decoder's CUDA kernels (fused_ops.hpp); without the CUDA build
// they report themselves unavailable.
#include "core/model/fused_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/autograd.h>

#ifdef COHORT_WITH_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "core/model/fused_kernels.hpp"
#include "core/model/gemm.hpp"
#include "core/model/hopper_gemm.hpp"
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

// A new tensor shaped as `like` but for its last dimension, `cols`, of like's dtype and device.
torch::Tensor empty_columns(const torch::Tensor& like, std::int64_t cols) {
  auto sizes = like.sizes().vec();
  sizes.back() = cols;
  return torch::empty(sizes, like.options());
}

// Up to three contiguous tensors side by side in their last dimension as column_parts (one: a
// tensor in one piece).
kernels::column_parts side_by_side(const std::vector<torch::Tensor>& ts) {
  kernels::column_parts parts;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    parts.part[i] = ts[i].data_ptr();
    parts.cols[i] = ts[i].size(-1);
  }
  return parts;
}

// Rotary on a q/k/v projection, q, k and v apart after it: forward qkv (B, T, cols) contiguous
// -> {q, k, v}, new contiguous (B, T, widths[i]); backward their gradients -> qkv's, one piece
// (no concatenation of three). cos/sin (T, head_dim) fp32 contiguous. The gradient of an output
// that got none is zero.
class rotary_function : public torch::autograd::Function<rotary_function> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& qkv, const torch::Tensor& cos,
                               const torch::Tensor& sin, std::int64_t q_cols, std::int64_t k_cols,
                               std::int64_t head_dim) {
    const c10::cuda::CUDAGuard guard(qkv.device());
    const std::int64_t v_cols = qkv.size(-1) - q_cols - k_cols;
    variable_list outs;
    for (const std::int64_t width : {q_cols, k_cols, v_cols}) outs.push_back(empty_columns(qkv, width));
    launch(kernels::direction::forward, qkv, side_by_side({qkv}), side_by_side(outs), cos, sin,
           q_cols + k_cols, head_dim);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["q_cols"] = q_cols;
    ctx->saved_data["k_cols"] = k_cols;
    ctx->saved_data["head_dim"] = head_dim;
    ctx->saved_data["sizes"] = qkv.sizes().vec();
    return outs;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto grad = grad_of_qkv(grads, ctx->saved_data["sizes"].toIntVector(), saved[0], saved[1],
                                  ctx->saved_data["q_cols"].toInt(), ctx->saved_data["k_cols"].toInt(),
                                  ctx->saved_data["head_dim"].toInt());
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

  // qkv's gradient (sizes), one piece, from q's, k's and v's (an undefined one counts as zero).
  static torch::Tensor grad_of_qkv(const variable_list& grads, const std::vector<std::int64_t>& sizes,
                                   const torch::Tensor& cos, const torch::Tensor& sin, std::int64_t q_cols,
                                   std::int64_t k_cols, std::int64_t head_dim) {
    const std::int64_t widths[3] = {q_cols, k_cols, sizes.back() - q_cols - k_cols};
    const auto& like = grads[0].defined() ? grads[0] : grads[1].defined() ? grads[1] : grads[2];
    const c10::cuda::CUDAGuard guard(like.device());
    std::vector<torch::Tensor> parts;
    for (int i = 0; i < 3; ++i) {
      auto part_sizes = sizes;
      part_sizes.back() = widths[i];
      parts.push_back(grads[i].defined() ? grads[i].contiguous() : torch::zeros(part_sizes, like.options()));
    }
    auto grad = torch::empty(sizes, like.options());
    launch(kernels::direction::backward, grad, side_by_side(parts), side_by_side({grad}), cos, sin,
           q_cols + k_cols, head_dim);
    return grad;
  }

 private:
  static void launch(kernels::direction dir, const torch::Tensor& like, const kernels::column_parts& in,
                     const kernels::column_parts& out, const torch::Tensor& cos, const torch::Tensor& sin,
                     std::int64_t rot_cols, std::int64_t head_dim) {
    const std::int64_t rows = like.numel() / like.size(-1);
    check_launch(
        kernels::rotary_half(dir, kernel_dtype(like), in, out, cos.data_ptr<float>(), sin.data_ptr<float>(),
                             rows, rot_cols, head_dim, cos.size(0), current_stream(like)),
        "fused_rotary_qkv");
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
    return {fused_swiglu_backward(grads[0], ctx->get_saved_variables()[0])};
  }
};

// t contiguous and 16-byte aligned (a copy where a view starts elsewhere): the norm kernels
// then take rows up to their vectorised length.
torch::Tensor aligned_contiguous(const torch::Tensor& t) {
  auto c = t.contiguous();
  return reinterpret_cast<std::uintptr_t>(c.data_ptr()) % 16 == 0 ? c : c.clone();
}

// cos and sin as the rotary kernels read them: (T, head_dim) fp32, contiguous and 16-byte aligned,
// T being like's second-to-last size; what is not so is refused, naming `op`.
std::pair<torch::Tensor, torch::Tensor> rotary_tables_for(const torch::Tensor& like, const torch::Tensor& cos,
                                                          const torch::Tensor& sin, std::int64_t head_dim,
                                                          const char* op) {
  const std::int64_t T = like.size(-2);
  if (cos.scalar_type() != torch::kFloat || sin.scalar_type() != torch::kFloat ||
      cos.numel() != T * head_dim || sin.numel() != T * head_dim || cos.device() != like.device() ||
      sin.device() != like.device()) {
    throw std::invalid_argument(std::string(op) +
                                ": fp32 (T, head_dim) cos and sin on the input's device expected");
  }
  return {aligned_contiguous(cos.reshape({T, head_dim})), aligned_contiguous(sin.reshape({T, head_dim}))};
}

// norm_forward/norm_backward as an autograd function of (x, residual, weight, bias): outputs y,
// and h = x + residual when residual is given. Saves h (the sum, or x), weight, mean, rstd. The
// optional inputs are optionals, not undefined tensors: autograd takes no undefined input.
class norm_function : public torch::autograd::Function<norm_function> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x,
                               const c10::optional<torch::Tensor>& residual_in,
                               const c10::optional<torch::Tensor>& weight_in,
                               const c10::optional<torch::Tensor>& bias_in, bool layer, double eps) {
    const auto value = [](const c10::optional<torch::Tensor>& t) { return t.has_value() ? *t : torch::Tensor(); };
    const auto residual = value(residual_in), weight = value(weight_in), bias = value(bias_in);
    const c10::cuda::CUDAGuard guard(x.device());
    const std::int64_t cols = x.size(-1), rows = x.numel() / std::max<std::int64_t>(cols, 1);
    const auto floats = x.options().dtype(torch::kFloat);
    auto y = torch::empty_like(x, torch::MemoryFormat::Contiguous);
    auto sum = residual.defined() ? torch::empty_like(x, torch::MemoryFormat::Contiguous) : torch::Tensor();
    auto mean = layer ? torch::empty({rows}, floats) : torch::Tensor();
    auto rstd = torch::empty({rows}, floats);
    const auto opt = [](const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; };
    check_launch(kernels::norm_forward(layer ? kernels::norm_type::layer : kernels::norm_type::rms,
                                       kernel_dtype(x), x.data_ptr(), opt(residual), opt(sum), opt(weight),
                                       opt(bias), y.data_ptr(), layer ? mean.data_ptr<float>() : nullptr,
                                       rstd.data_ptr<float>(), rows, cols, static_cast<float>(eps),
                                       current_stream(x)),
                 "fused_norm");
    ctx->save_for_backward({residual.defined() ? sum : x, weight, mean, rstd});
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["residual"] = residual.defined();
    ctx->saved_data["weight_grad"] = weight.defined() && weight.requires_grad();
    ctx->saved_data["bias_grad"] = bias.defined() && bias.requires_grad();
    if (residual.defined()) return {y, sum};
    return {y};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &h = saved[0], &weight = saved[1], &mean = saved[2], &rstd = saved[3];
    const bool layer = ctx->saved_data["layer"].toBool(), residual = ctx->saved_data["residual"].toBool();
    const c10::cuda::CUDAGuard guard(h.device());
    const std::int64_t cols = h.size(-1), rows = h.numel() / std::max<std::int64_t>(cols, 1);
    auto grad_y = grads[0].defined() ? aligned_contiguous(grads[0]) : torch::zeros_like(h);
    torch::Tensor grad_sum;
    if (residual && grads.size() > 1 && grads[1].defined()) grad_sum = aligned_contiguous(grads[1]);
    auto grad_h = torch::empty_like(h, torch::MemoryFormat::Contiguous);
    const bool want_weight = ctx->saved_data["weight_grad"].toBool();
    const bool want_bias = ctx->saved_data["bias_grad"].toBool();
    auto grad_weight = want_weight ? torch::empty({cols}, h.options()) : torch::Tensor();
    auto grad_bias = want_bias ? torch::empty({cols}, h.options()) : torch::Tensor();
    auto scratch = want_weight || want_bias
                       ? torch::empty({kernels::norm_backward_scratch(rows, cols)}, h.options().dtype(torch::kFloat))
                       : torch::Tensor();
    const auto opt = [](const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; };
    check_launch(kernels::norm_backward(layer ? kernels::norm_type::layer : kernels::norm_type::rms,
                                        kernel_dtype(h), grad_y.data_ptr(), h.data_ptr(), opt(weight),
                                        layer ? mean.data_ptr<float>() : nullptr, rstd.data_ptr<float>(),
                                        opt(grad_sum), grad_h.data_ptr(), opt(grad_weight), opt(grad_bias),
                                        scratch.defined() ? scratch.data_ptr<float>() : nullptr, rows, cols,
                                        current_stream(h)),
                 "fused_norm backward");
    // x and residual feed h through a sum: both get h's whole gradient. One entry per input of
    // forward; none where an optional was not given.
    return {grad_h, residual ? grad_h : torch::Tensor(), grad_weight, grad_bias, torch::Tensor(), torch::Tensor()};
  }
};

// x @ weight + bias as one GEMM with the bias added in it (addmm), whose backward sums the bias's
// gradient with column_sum where autograd runs ATen's reduction. Saves x and weight.
class biased_matmul_function : public torch::autograd::Function<biased_matmul_function> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias) {
    ctx->save_for_backward({x, weight});
    return gemm::linear(x, weight.t(), bias);  // weight is (in, out)
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1];
    const c10::cuda::CUDAGuard guard(x.device());
    const auto g = aligned_contiguous(grads[0]);
    const auto g2 = g.view({-1, g.size(-1)});  // (rows, out)
    torch::Tensor grad_x, grad_weight, grad_bias;
    if (ctx->needs_input_grad(0)) grad_x = gemm::mm(g2, weight.t()).view(x.sizes());
    if (ctx->needs_input_grad(1)) grad_weight = gemm::mm(x.reshape({-1, x.size(-1)}).t(), g2);
    if (ctx->needs_input_grad(2)) {
      const std::int64_t rows = g2.size(0), cols = g2.size(1);
      grad_bias = torch::empty({cols}, g.options());
      auto scratch = torch::empty({kernels::norm_backward_scratch(rows, cols)}, g.options().dtype(torch::kFloat));
      check_launch(kernels::column_sum(kernel_dtype(g), g2.data_ptr(), grad_bias.data_ptr(),
                                       scratch.data_ptr<float>(), rows, cols, current_stream(g)),
                   "fused_biased_matmul backward");
    }
    return {grad_x, grad_weight, grad_bias};
  }
};

// fused_biased_gelu's autograd: see fused_ops.hpp. Saves x, the weight and GELU's input.
class biased_gelu_function : public torch::autograd::Function<biased_gelu_function> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, bool conv1d) {
    const auto x2 = x.reshape({-1, x.size(-1)});
    const auto pre = gemm::linear(x2, conv1d ? weight.t() : weight, bias);  // GELU's input
    ctx->save_for_backward({x, weight, pre});
    ctx->saved_data["conv1d"] = conv1d;
    auto sizes = x.sizes().vec();
    sizes.back() = pre.size(1);
    return torch::gelu(pre, "tanh").view(sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &pre = saved[2];
    const bool conv1d = ctx->saved_data["conv1d"].toBool();
    const c10::cuda::CUDAGuard guard(x.device());
    const auto g = aligned_contiguous(grads[0]);
    const std::int64_t rows = pre.size(0), cols = pre.size(1);
    auto grad_pre = torch::empty({rows, cols}, g.options());
    auto grad_bias = torch::empty({cols}, g.options());
    auto scratch =
        torch::empty({kernels::norm_backward_scratch(rows, cols)}, g.options().dtype(torch::kFloat));
    check_launch(kernels::gelu_tanh_backward(kernel_dtype(g), g.data_ptr(), pre.data_ptr(),
                                             grad_pre.data_ptr(), grad_bias.data_ptr(),
                                             scratch.data_ptr<float>(), rows, cols, current_stream(g)),
                 "fused_biased_gelu backward");
    const auto x2 = x.reshape({-1, x.size(-1)});
    torch::Tensor grad_x, grad_weight;
    if (ctx->needs_input_grad(0)) grad_x = gemm::mm(grad_pre, conv1d ? weight.t() : weight).view(x.sizes());
    if (ctx->needs_input_grad(1))
      grad_weight = conv1d ? gemm::mm(x2.t(), grad_pre) : gemm::mm(grad_pre.t(), x2);
    return {grad_x, grad_weight, grad_bias, torch::Tensor()};
  }
};

}  // namespace

bool fused_kernels_available(const torch::Tensor& x) {
  const auto t = x.scalar_type();
  return x.is_cuda() && (t == torch::kFloat || t == torch::kBFloat16 || t == torch::kHalf);
}

std::vector<torch::Tensor> fused_rotary_qkv(const torch::Tensor& qkv, const torch::Tensor& cos,
                                            const torch::Tensor& sin, std::int64_t q_cols,
                                            std::int64_t k_cols, std::int64_t head_dim) {
  if (qkv.dim() < 2 || head_dim <= 0 || head_dim % 2 != 0 || q_cols < 0 || k_cols < 0 ||
      q_cols % head_dim != 0 || k_cols % head_dim != 0 || q_cols + k_cols > qkv.size(-1)) {
    throw std::invalid_argument(
        "fused_rotary_qkv: (.., T, cols) input with q_cols and k_cols multiples of an even "
        "head_dim, at most cols together, expected");
  }
  const auto [c, s] = rotary_tables_for(qkv, cos, sin, head_dim, "fused_rotary_qkv");
  return rotary_function::apply(qkv.contiguous(), c, s, q_cols, k_cols, head_dim);
}

torch::Tensor fused_rotary_qkv_backward(const std::vector<torch::Tensor>& grads, const torch::Tensor& cos,
                                        const torch::Tensor& sin, std::int64_t q_cols, std::int64_t k_cols,
                                        std::int64_t v_cols, std::int64_t head_dim) {
  const torch::Tensor* like = nullptr;
  bool shaped = grads.size() == 3 && head_dim > 0 && head_dim % 2 == 0 && q_cols > 0 && k_cols > 0 &&
                v_cols >= 0 && q_cols % head_dim == 0 && k_cols % head_dim == 0;
  for (std::size_t i = 0; shaped && i < 3; ++i) {
    if (!grads[i].defined()) continue;
    if (like == nullptr) like = &grads[i];
    const std::int64_t width = i == 0 ? q_cols : i == 1 ? k_cols : v_cols;
    shaped = grads[i].dim() >= 2 && grads[i].size(-1) == width &&
             grads[i].sizes().slice(0, grads[i].dim() - 1) == like->sizes().slice(0, like->dim() - 1) &&
             grads[i].scalar_type() == like->scalar_type() && grads[i].device() == like->device();
  }
  if (!shaped || like == nullptr) {
    throw std::invalid_argument(
        "fused_rotary_qkv_backward: the gradients of q, k and v (.., T, q_cols | k_cols | v_cols; an "
        "undefined one counts as zero, at least one defined; one dtype and device), q_cols and k_cols "
        "multiples of an even head_dim, expected");
  }
  const auto [c, s] = rotary_tables_for(*like, cos, sin, head_dim, "fused_rotary_qkv_backward");
  auto sizes = like->sizes().vec();
  sizes.back() = q_cols + k_cols + v_cols;
  return rotary_function::grad_of_qkv(grads, sizes, c, s, q_cols, k_cols, head_dim);
}

torch::Tensor fused_swiglu(const torch::Tensor& gate_up) {
  if (gate_up.size(-1) % 2 != 0) {
    throw std::invalid_argument("fused_swiglu: the last dimension holds gate and up: even size expected");
  }
  return swiglu_function::apply(gate_up);
}

torch::Tensor fused_swiglu_backward(const torch::Tensor& grad_out, const torch::Tensor& gate_up) {
  const c10::cuda::CUDAGuard guard(gate_up.device());
  const auto go = grad_out.contiguous(), gu = gate_up.contiguous();
  const std::int64_t inner = gu.size(-1) / 2, rows = gu.numel() / gu.size(-1);
  auto grad = torch::empty_like(gu, torch::MemoryFormat::Contiguous);
  check_launch(kernels::swiglu_backward(kernel_dtype(gu), go.data_ptr(), gu.data_ptr(), grad.data_ptr(), rows,
                                        inner, current_stream(gu)),
               "fused_swiglu backward");
  return grad;
}

bool hopper_device(const torch::Tensor& x) {
  if (!x.is_cuda()) return false;
  const auto* props = at::cuda::getDeviceProperties(x.get_device());
  return props->major == 9 && props->minor == 0;
}

namespace {

// A bf16 CUDA tensor on x's device; as a weight, 2-D with contiguous columns and rows a multiple of
// 8 elements apart (what hopper_gemm.hpp's tensor maps take).
bool hopper_operand(const torch::Tensor& t, const torch::Tensor& x) {
  return t.defined() && t.is_cuda() && t.scalar_type() == torch::kBFloat16 && t.device() == x.device();
}
bool hopper_weight(const torch::Tensor& w, const torch::Tensor& x) {
  return hopper_operand(w, x) && w.dim() == 2 && w.stride(1) == 1 && w.stride(0) % 8 == 0;
}

// Whether x's rows (x: (..., k), at least 1-D) by `cols` output columns are whole tiles of the
// Hopper GEMM, on a device that runs it; never in a build without the kernel.
bool hopper_fits(const torch::Tensor& x, std::int64_t cols) {
#ifdef COHORT_WITH_HOPPER_GEMM
  const std::int64_t k = x.size(-1), rows = k == 0 ? 0 : x.numel() / k;
  return kernels::hopper_gemm_fits(rows, cols, k) && kernels::hopper_gemm_available(x.get_device());
#else
  (void)x, (void)cols;
  return false;
#endif
}

// Runs `launch`, a call of one of hopper_gemm.hpp's launchers, in a build that has the kernel.
// Without it (nvcc before 12.5 builds none) every fits above says no, so no caller gets here, and
// the launchers stay unreferenced: the lambda holding the call is never called, so its body is
// never emitted, and the build links.
template <class Launch>
int hopper_launch(const Launch& launch) {
#ifdef COHORT_WITH_HOPPER_GEMM
  return launch();
#else
  (void)launch;
  return static_cast<int>(cudaErrorNotSupported);
#endif
}

}  // namespace

bool fused_linear_swiglu_fits(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& up) {
  return hopper_operand(x, x) && x.dim() >= 1 && x.is_contiguous() && hopper_weight(gate, x) &&
         hopper_weight(up, x) && gate.sizes() == up.sizes() && gate.size(1) == x.size(-1) &&
         gate.stride(0) == up.stride(0) && hopper_fits(x, 2 * gate.size(0));
}

std::pair<torch::Tensor, torch::Tensor> fused_linear_swiglu(const torch::Tensor& x, const torch::Tensor& gate,
                                                            const torch::Tensor& up) {
  if (!fused_linear_swiglu_fits(x, gate, up)) {
    throw std::invalid_argument(
        "fused_linear_swiglu: a contiguous bf16 x (rows a multiple of 128, in of 64) and bf16 gate and up "
        "(inner a multiple of 128, in) on one device of compute capability 9.0, in a build with the Hopper "
        "GEMM, expected");
  }
  const c10::cuda::CUDAGuard guard(x.device());
  const std::int64_t in = x.size(-1), rows = x.numel() / in, inner = gate.size(0);
  auto gate_up = empty_columns(x, 2 * inner), h = empty_columns(x, inner);
  check_launch(hopper_launch([&] {
                 return kernels::hopper_linear_swiglu(x.data_ptr(), gate.data_ptr(), up.data_ptr(),
                                                      gate.stride(0), gate_up.data_ptr(), h.data_ptr(), rows,
                                                      inner, in, current_stream(x));
               }),
               "fused_linear_swiglu");
  return {gate_up, h};
}

bool fused_swiglu_input_grad_fits(const torch::Tensor& x, const torch::Tensor& down) {
  return hopper_operand(x, x) && x.dim() >= 1 && hopper_weight(down, x) && down.size(0) == x.size(-1) &&
         hopper_fits(x, down.size(1));
}

torch::Tensor fused_swiglu_input_grad(const torch::Tensor& grad_y, const torch::Tensor& down,
                                      const torch::Tensor& gate_up) {
  const std::int64_t inner = down.dim() == 2 ? down.size(1) : 0;
  if (!fused_swiglu_input_grad_fits(grad_y, down) || !hopper_operand(gate_up, grad_y) ||
      gate_up.numel() != grad_y.numel() / grad_y.size(-1) * 2 * inner || gate_up.size(-1) != 2 * inner) {
    throw std::invalid_argument(
        "fused_swiglu_input_grad: a bf16 grad_y (rows a multiple of 128, hidden of 64), down (hidden, "
        "inner a multiple of 256) and gate_up (rows, 2 * inner) on one device of compute capability 9.0, "
        "in a build with the Hopper GEMM, expected");
  }
  const c10::cuda::CUDAGuard guard(grad_y.device());
  const auto g = aligned_contiguous(grad_y), gu = aligned_contiguous(gate_up);
  const std::int64_t hidden = g.size(-1), rows = g.numel() / hidden;
  auto grad = torch::empty_like(gu, torch::MemoryFormat::Contiguous);
  check_launch(hopper_launch([&] {
                 return kernels::hopper_swiglu_input_grad(g.data_ptr(), down.data_ptr(), down.stride(0),
                                                          gu.data_ptr(), grad.data_ptr(), rows, inner, hidden,
                                                          current_stream(g));
               }),
               "fused_swiglu_input_grad");
  return grad;
}

torch::Tensor own_linear(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!hopper_operand(x, x) || x.dim() < 1 || !x.is_contiguous() || !hopper_weight(weight, x) ||
      weight.size(1) != x.size(-1) || !hopper_fits(x, weight.size(0))) {
    throw std::invalid_argument(
        "own_linear: a contiguous bf16 x (rows a multiple of 128, in of 64) and a bf16 weight (out a "
        "multiple of 256, in) on one device of compute capability 9.0, in a build with the Hopper GEMM, "
        "expected");
  }
  const c10::cuda::CUDAGuard guard(x.device());
  const std::int64_t in = x.size(-1), rows = x.numel() / in, out_cols = weight.size(0);
  auto y = empty_columns(x, out_cols);
  check_launch(hopper_launch([&] {
                 return kernels::hopper_linear(x.data_ptr(), weight.data_ptr(), weight.stride(0),
                                               y.data_ptr(), rows, out_cols, in, current_stream(x));
               }),
               "own_linear");
  return y;
}

bool fused_linear_rotary_qkv_fits(const torch::Tensor& x, const torch::Tensor& weight, std::int64_t q_cols,
                                  std::int64_t k_cols, std::int64_t head_dim) {
  if (!hopper_operand(x, x) || x.dim() < 2 || !x.is_contiguous() || !hopper_weight(weight, x) ||
      weight.size(1) != x.size(-1) || q_cols <= 0 || k_cols <= 0 || weight.size(0) <= q_cols + k_cols)
    return false;
#ifdef COHORT_WITH_HOPPER_GEMM
  const std::int64_t in = x.size(-1), rows = in == 0 ? 0 : x.numel() / in;
  const kernels::qkv_columns cols{q_cols, k_cols, weight.size(0) - q_cols - k_cols};
  return kernels::hopper_rotary_fits(rows, cols, in, head_dim) &&
         kernels::hopper_gemm_available(x.get_device());
#else
  (void)head_dim;
  return false;
#endif
}

std::vector<torch::Tensor> fused_linear_rotary_qkv(const torch::Tensor& x, const torch::Tensor& weight,
                                                   const torch::Tensor& cos, const torch::Tensor& sin,
                                                   std::int64_t q_cols, std::int64_t k_cols,
                                                   std::int64_t head_dim) {
  if (!fused_linear_rotary_qkv_fits(x, weight, q_cols, k_cols, head_dim)) {
    throw std::invalid_argument(
        "fused_linear_rotary_qkv: a contiguous bf16 x (.., T, in; rows a multiple of 128, in of 64) and "
        "a bf16 weight (q_cols + k_cols + v_cols, in) on one device of compute capability 9.0, heads of a "
        "multiple of 16 dividing 256, each part's columns a multiple of 64 and all of them of 256, in a "
        "build with the Hopper GEMM, expected");
  }
  const auto [c, s] = rotary_tables_for(x, cos, sin, head_dim, "fused_linear_rotary_qkv");
  const c10::cuda::CUDAGuard guard(x.device());
  const std::int64_t in = x.size(-1), rows = x.numel() / in;
  const kernels::qkv_columns cols{q_cols, k_cols, weight.size(0) - q_cols - k_cols};
  std::vector<torch::Tensor> outs;
  for (const std::int64_t width : {cols.q, cols.k, cols.v}) outs.push_back(empty_columns(x, width));
  const kernels::qkv_outputs out{outs[0].data_ptr(), outs[1].data_ptr(), outs[2].data_ptr(), cols};
  const kernels::rotary_tables tables{c.data_ptr<float>(), s.data_ptr<float>(), x.size(-2), head_dim};
  check_launch(hopper_launch([&] {
                 return kernels::hopper_linear_rotary(x.data_ptr(), weight.data_ptr(), weight.stride(0), out,
                                                      tables, rows, in, current_stream(x));
               }),
               "fused_linear_rotary_qkv");
  return outs;
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

torch::Tensor fused_biased_matmul(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!fused_kernels_available(x) || x.dim() < 1 || weight.dim() != 2 || weight.size(0) != x.size(-1) ||
      bias.dim() != 1 || bias.size(0) != weight.size(1) || weight.scalar_type() != x.scalar_type() ||
      bias.scalar_type() != x.scalar_type() || weight.device() != x.device() || bias.device() != x.device()) {
    throw std::invalid_argument("fused_biased_matmul: a CUDA fp32/bf16/fp16 x (..., in), a weight (in, out) and "
                                "a bias (out) of its dtype and device expected");
  }
  return biased_matmul_function::apply(x, weight, bias);
}

torch::Tensor fused_biased_gelu(const torch::Tensor& x, const torch::Tensor& weight,
                                const torch::Tensor& bias, bool conv1d) {
  const std::int64_t in = conv1d ? weight.size(0) : weight.size(1),
                     out = conv1d ? weight.size(1) : weight.size(0);
  if (!fused_kernels_available(x) || x.dim() < 1 || weight.dim() != 2 || in != x.size(-1) ||
      bias.dim() != 1 || bias.size(0) != out || weight.scalar_type() != x.scalar_type() ||
      bias.scalar_type() != x.scalar_type() || weight.device() != x.device() || bias.device() != x.device()) {
    throw std::invalid_argument(
        "fused_biased_gelu: a CUDA fp32/bf16/fp16 x (..., in), a weight (in, out) "
        "(conv1d; else (out, in)) and a bias (out) of its dtype and device expected");
  }
  return biased_gelu_function::apply(x, weight, bias, conv1d);
}

bool fused_norm_available(const torch::Tensor& x) {
  if (!fused_kernels_available(x) || x.dim() == 0 || x.size(-1) == 0) return false;
  const std::int64_t cols = x.size(-1);
  return cols <= kernels::norm_max_cols(kernel_dtype(x), cols * x.element_size() % 16 == 0);
}

std::vector<torch::Tensor> fused_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                      const torch::Tensor& weight, const torch::Tensor& bias, bool layer_norm,
                                      double eps) {
  const std::int64_t cols = x.dim() > 0 ? x.size(-1) : 0;
  const auto vector_of_x = [&](const torch::Tensor& t) {
    return !t.defined() || (t.dim() == 1 && t.size(0) == cols && t.scalar_type() == x.scalar_type() &&
                            t.device() == x.device());
  };
  if (!fused_norm_available(x) || !vector_of_x(weight) || !vector_of_x(bias) ||
      (!layer_norm && bias.defined()) ||
      (residual.defined() && (residual.sizes() != x.sizes() || residual.scalar_type() != x.scalar_type() ||
                              residual.device() != x.device()))) {
    throw std::invalid_argument("fused_norm: a CUDA fp32/bf16/fp16 x with a last dimension the kernels take "
                                "(fused_norm_available), a residual of its shape, dtype and device or none, "
                                "and weight/bias (last dimension) in its dtype or none (RMSNorm: no bias) "
                                "expected");
  }
  const auto given = [](const torch::Tensor& t) {
    return t.defined() ? c10::optional<torch::Tensor>(aligned_contiguous(t)) : c10::nullopt;
  };
  return norm_function::apply(aligned_contiguous(x), given(residual), given(weight), given(bias), layer_norm, eps);
}

namespace {

// `entries` in device memory on `device`, by an asynchronous copy from pinned host memory (the
// caching host allocator keeps that block until the copy is done): a launch's table of tensors.
template <typename Entry>
torch::Tensor device_table(const std::vector<Entry>& entries, torch::Device device) {
  static_assert(std::is_trivially_copyable<Entry>::value, "a kernel's table is copied byte for byte");
  const auto bytes = static_cast<std::int64_t>(entries.size() * sizeof(Entry));
  auto host = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
  std::memcpy(host.data_ptr(), entries.data(), static_cast<std::size_t>(bytes));
  return host.to(device, /*non_blocking=*/true);
}

// fused_adamw_step's inputs as its header states them, or std::invalid_argument naming what is not.
void check_adamw_targets(const std::vector<fused_adamw_target>& targets, const torch::Tensor& device_scale) {
  const auto device = targets.front().master.device();
  const auto same_place = [&](const torch::Tensor& t, const torch::Tensor& master) {
    return t.defined() && t.is_contiguous() && t.device() == device && t.numel() == master.numel();
  };
  for (const auto& t : targets) {
    if (t.state == nullptr) throw std::invalid_argument("fused_adamw_step: a target without its AdamW state");
    if (!t.master.defined() || !t.master.is_cuda() || t.master.scalar_type() != torch::kFloat ||
        !t.master.is_contiguous() || t.master.device() != device)
      throw std::invalid_argument(
          "fused_adamw_step: every master must be a contiguous fp32 tensor on one CUDA device");
    if (!same_place(t.grad, t.master))
      throw std::invalid_argument(
          "fused_adamw_step: a gradient must be contiguous, on the master's device, "
          "with its " +
          std::to_string(t.master.numel()) + " elements");
    if (t.copy.defined() && !same_place(t.copy, t.master))
      throw std::invalid_argument(
          "fused_adamw_step: a copy must be contiguous, on the master's device, "
          "with its " +
          std::to_string(t.master.numel()) + " elements");
    kernel_dtype(t.grad);
    if (t.copy.defined()) kernel_dtype(t.copy);
  }
  if (device_scale.defined() && (device_scale.scalar_type() != torch::kDouble || device_scale.numel() != 1 ||
                                 device_scale.device() != device))
    throw std::invalid_argument(
        "fused_adamw_step: the device scale must be one fp64 element on the masters' device");
}

kernels::adamw_scalars adamw_scalars_of(const adamw_options& o, double grad_scale,
                                        const torch::Tensor& device_scale) {
  kernels::adamw_scalars s;
  s.lr = static_cast<float>(o.lr);
  s.beta1 = static_cast<float>(o.beta1);
  s.beta2 = static_cast<float>(o.beta2);
  s.eps = static_cast<float>(o.eps);
  s.weight_decay = static_cast<float>(o.weight_decay);
  s.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  s.grad_scale = static_cast<float>(grad_scale);
  s.device_scale = device_scale.defined() ? device_scale.data_ptr<double>() : nullptr;
  return s;
}

// The tensors of one launch: those of one gradient dtype and one copy dtype (none counts as fp32).
struct adamw_launch_table {
  kernels::dtype grad, copy;
  std::vector<kernels::adamw_tensor> tensors;
};

// Each target's state counted a step further (its moments made at its first) and its kernel
// entry, with this step's bias corrections, in the table of its kind; empty tensors in none.
std::vector<adamw_launch_table> adamw_tables_of(const std::vector<fused_adamw_target>& targets,
                                                const adamw_options& o) {
  std::vector<adamw_launch_table> kinds;
  for (const auto& t : targets) {
    adamw_state& state = *t.state;
    if (!state.exp_avg.defined()) {
      state.exp_avg = torch::zeros_like(t.master);
      state.exp_avg_sq = torch::zeros_like(t.master);
    }
    ++state.step;
    const double step = static_cast<double>(state.step);
    kernels::adamw_tensor k;
    k.param = t.master.data_ptr<float>();
    k.grad = t.grad.data_ptr();
    k.exp_avg = state.exp_avg.data_ptr<float>();
    k.exp_avg_sq = state.exp_avg_sq.data_ptr<float>();
    k.copy = t.copy.defined() ? t.copy.data_ptr() : nullptr;
    k.n = t.master.numel();
    k.step_size = static_cast<float>(o.lr / (1.0 - std::pow(o.beta1, step)));
    k.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, step)));
    if (k.n == 0) continue;
    const auto grad_type = kernel_dtype(t.grad);
    const auto copy_type = t.copy.defined() ? kernel_dtype(t.copy) : kernels::dtype::f32;
    auto kind = std::find_if(kinds.begin(), kinds.end(), [&](const adamw_launch_table& c) {
      return c.grad == grad_type && c.copy == copy_type;
    });
    if (kind == kinds.end()) kind = kinds.insert(kinds.end(), adamw_launch_table{grad_type, copy_type, {}});
    kind->tensors.push_back(k);
  }
  return kinds;
}

}  // namespace

void fused_adamw_step(const std::vector<fused_adamw_target>& targets, const adamw_options& o,
                      double grad_scale, const torch::Tensor& device_scale) {
  if (targets.empty()) return;
  check_adamw_targets(targets, device_scale);
  const auto device = targets.front().master.device();
  torch::NoGradGuard no_grad;
  const c10::cuda::CUDAGuard guard(device);
  const auto s = adamw_scalars_of(o, grad_scale, device_scale);
  for (auto& kind : adamw_tables_of(targets, o)) {  // one launch per kind
    if (kind.tensors.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw std::invalid_argument("fused_adamw_step: too many tensors for one launch");
    const int count = static_cast<int>(kind.tensors.size());
    const auto blocks = kernels::adamw_blocks(kind.grad, kind.copy, kind.tensors.data(), count);
    const auto table = device_table(kind.tensors, device);
    check_launch(
        kernels::adamw(kind.grad, kind.copy, static_cast<const kernels::adamw_tensor*>(table.data_ptr()),
                       count, blocks, s, current_stream(targets.front().master)),
        "fused_adamw_step");
  }
}

torch::Tensor fused_square_sum(const std::vector<torch::Tensor>& xs) {
  if (xs.empty()) throw std::invalid_argument("fused_square_sum: no tensors");
  const auto device = xs.front().device();
  std::vector<kernels::square_tensor> tensors;
  if (xs.size() > static_cast<std::size_t>(std::numeric_limits<int>::max() / kernels::square_sum_partials))
    throw std::invalid_argument("fused_square_sum: too many tensors");
  for (const auto& x : xs) {
    if (!x.is_cuda() || !x.is_contiguous() || x.device() != device)
      throw std::invalid_argument("fused_square_sum: contiguous CUDA tensors of one device expected");
    kernels::square_tensor t;
    t.x = x.data_ptr();
    t.n = x.numel();
    t.type = kernel_dtype(x);
    tensors.push_back(t);
  }
  const int count = static_cast<int>(tensors.size());
  const int total = kernels::square_partial_blocks(tensors.data(), count);
  const c10::cuda::CUDAGuard guard(device);
  auto partials = torch::empty({total + 1}, xs.front().options().dtype(torch::kDouble));
  auto out = partials.narrow(0, total, 1);
  const auto table = device_table(tensors, device);
  check_launch(kernels::square_partials(static_cast<const kernels::square_tensor*>(table.data_ptr()), count,
                                        total, partials.data_ptr<double>(), current_stream(xs.front())),
               "fused_square_sum");
  check_launch(kernels::sum_partials(partials.data_ptr<double>(), total, out.data_ptr<double>(),
                                     current_stream(xs.front())),
               "fused_square_sum");
  return out.squeeze(0);
}

void fused_widen_into(const std::vector<torch::Tensor>& xs, torch::Tensor& out) {
  if (xs.empty()) return;
  const auto device = out.device();
  const auto type = xs.front().scalar_type();
  if (!out.is_cuda() || !out.is_contiguous() || out.scalar_type() != torch::kFloat)
    throw std::invalid_argument("fused_widen_into: out must be a contiguous fp32 CUDA tensor");
  std::vector<kernels::widen_tensor> tensors;
  std::int64_t offset = 0;
  for (const auto& x : xs) {
    if (!x.is_contiguous() || x.device() != device || x.scalar_type() != type ||
        (type != torch::kBFloat16 && type != torch::kHalf))
      throw std::invalid_argument(
          "fused_widen_into: contiguous bf16 or fp16 tensors of one dtype on out's device expected");
    kernels::widen_tensor t;
    t.x = x.data_ptr();
    t.n = x.numel();
    t.offset = offset;
    offset += t.n;
    if (t.n > 0) tensors.push_back(t);
  }
  if (offset > out.numel()) throw std::invalid_argument("fused_widen_into: out is smaller than the tensors");
  if (tensors.empty()) return;
  if (tensors.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw std::invalid_argument("fused_widen_into: too many tensors");
  const int count = static_cast<int>(tensors.size());
  const auto blocks =
      kernels::widen_blocks(kernel_dtype(xs.front()), tensors.data(), count, out.data_ptr<float>());
  const c10::cuda::CUDAGuard guard(device);
  const auto table = device_table(tensors, device);
  check_launch(
      kernels::widen(kernel_dtype(xs.front()), static_cast<const kernels::widen_tensor*>(table.data_ptr()),
                     count, blocks, out.data_ptr<float>(), current_stream(out)),
      "fused_widen_into");
}

#else

bool fused_kernels_available(const torch::Tensor&) { return false; }

void fused_widen_into(const std::vector<torch::Tensor>&, torch::Tensor&) {
  throw std::logic_error("fused_widen_into: this build has no CUDA kernels (check fused_kernels_available)");
}

torch::Tensor fused_square_sum(const std::vector<torch::Tensor>&) {
  throw std::logic_error("fused_square_sum: this build has no CUDA kernels (check fused_kernels_available)");
}

torch::Tensor fused_cross_entropy(torch::Tensor&, const torch::Tensor&, bool) {
  throw std::logic_error("fused_cross_entropy: this build has no CUDA kernels (check fused_kernels_available)");
}

std::vector<torch::Tensor> fused_rotary_qkv(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                            std::int64_t, std::int64_t, std::int64_t) {
  throw std::logic_error("fused_rotary_qkv: this build has no CUDA kernels (check fused_kernels_available)");
}

torch::Tensor fused_rotary_qkv_backward(const std::vector<torch::Tensor>&, const torch::Tensor&,
                                        const torch::Tensor&, std::int64_t, std::int64_t, std::int64_t,
                                        std::int64_t) {
  throw std::logic_error(
      "fused_rotary_qkv_backward: this build has no CUDA kernels (check fused_kernels_available)");
}

torch::Tensor own_linear(const torch::Tensor&, const torch::Tensor&) {
  throw std::logic_error("own_linear: this build has no CUDA kernels (check hopper_device)");
}

bool fused_linear_rotary_qkv_fits(const torch::Tensor&, const torch::Tensor&, std::int64_t, std::int64_t,
                                  std::int64_t) {
  return false;
}

std::vector<torch::Tensor> fused_linear_rotary_qkv(const torch::Tensor&, const torch::Tensor&,
                                                   const torch::Tensor&, const torch::Tensor&, std::int64_t,
                                                   std::int64_t, std::int64_t) {
  throw std::logic_error(
      "fused_linear_rotary_qkv: this build has no CUDA kernels (check fused_linear_rotary_qkv_fits)");
}

torch::Tensor fused_swiglu(const torch::Tensor&) {
  throw std::logic_error("fused_swiglu: this build has no CUDA kernels (check fused_kernels_available)");
}

torch::Tensor fused_swiglu_backward(const torch::Tensor&, const torch::Tensor&) {
  throw std::logic_error(
      "fused_swiglu_backward: this build has no CUDA kernels (check fused_kernels_available)");
}

bool hopper_device(const torch::Tensor&) { return false; }

bool fused_linear_swiglu_fits(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  return false;
}

std::pair<torch::Tensor, torch::Tensor> fused_linear_swiglu(const torch::Tensor&, const torch::Tensor&,
                                                            const torch::Tensor&) {
  throw std::logic_error(
      "fused_linear_swiglu: this build has no CUDA kernels (check fused_linear_swiglu_fits)");
}

bool fused_swiglu_input_grad_fits(const torch::Tensor&, const torch::Tensor&) { return false; }

torch::Tensor fused_swiglu_input_grad(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  throw std::logic_error(
      "fused_swiglu_input_grad: this build has no CUDA kernels (check fused_swiglu_input_grad_fits)");
}

torch::Tensor fused_biased_matmul(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  throw std::logic_error("fused_biased_matmul: this build has no CUDA kernels (check fused_kernels_available)");
}

torch::Tensor fused_biased_gelu(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, bool) {
  throw std::logic_error("fused_biased_gelu: this build has no CUDA kernels (check fused_kernels_available)");
}

bool fused_norm_available(const torch::Tensor&) { return false; }

std::vector<torch::Tensor> fused_norm(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                      const torch::Tensor&, bool, double) {
  throw std::logic_error("fused_norm: this build has no CUDA kernels (check fused_kernels_available)");
}

void fused_adamw_step(const std::vector<fused_adamw_target>&, const adamw_options&, double,
                      const torch::Tensor&) {
  throw std::logic_error("fused_adamw_step: this build has no CUDA kernels (check fused_kernels_available)");
}

#endif

void fused_adamw_step(torch::Tensor master, const torch::Tensor& grad, adamw_state& state,
                      const adamw_options& o, double grad_scale, const torch::Tensor& copy,
                      const torch::Tensor& device_scale) {
  fused_adamw_step({fused_adamw_target{std::move(master), grad, &state, copy}}, o, grad_scale, device_scale);
}

torch::Tensor fused_square_sum(const torch::Tensor& x) {
  return fused_square_sum(std::vector<torch::Tensor>{x});
}

}  // namespace cohort::core::model

// The decoder's modules. Formulas follow transformers' modeling_{gpt2,llama,mistral,qwen2,opt,
// gptj}.py; comments name the places where families differ.
#include "core/model/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <torch/autograd.h>
#include <torch/utils.h>

#include "core/model/fused_ops.hpp"
#include "core/model/gemm.hpp"
#include "core/model/model_error.hpp"
#include "core/model/torch_compat.hpp"
#include "core/model/weight_grad_sink.hpp"
#include "core/model/weight_source.hpp"

namespace cohort::core::model {
namespace {

struct hf_layout {
  std::string embed, positions, project_in, project_out, final_norm, layers;
  std::string norm1, norm2, qkv, q, k, v, o, gate, up, down;
};

hf_layout layout_of(family f) {
  switch (f) {
    case family::gpt2:
      return {"transformer.wte", "transformer.wpe", "", "", "transformer.ln_f", "transformer.h.",
              "ln_1", "ln_2", "attn.c_attn", "", "", "", "attn.c_proj", "", "mlp.c_fc", "mlp.c_proj"};
    case family::gptj:
      return {"transformer.wte", "", "", "", "transformer.ln_f", "transformer.h.",
              "ln_1", "", "", "attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj", "",
              "mlp.fc_in", "mlp.fc_out"};
    case family::opt:
      return {"model.decoder.embed_tokens", "model.decoder.embed_positions",
              "model.decoder.project_in", "model.decoder.project_out",
              "model.decoder.final_layer_norm", "model.decoder.layers.", "self_attn_layer_norm",
              "final_layer_norm", "", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
              "self_attn.out_proj", "", "fc1", "fc2"};
    case family::llama:
    case family::mistral:
    case family::qwen2:
      break;
  }
  return {"model.embed_tokens", "", "", "", "model.norm", "model.layers.", "input_layernorm",
          "post_attention_layernorm", "", "self_attn.q_proj", "self_attn.k_proj",
          "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
}

// `w` in x's dtype: itself when it already is (or undefined), else a converted copy for the call
// (a frozen LoRA base held in another dtype than the activations).
torch::Tensor like(const torch::Tensor& w, const torch::Tensor& x) {
  return !w.defined() || w.scalar_type() == x.scalar_type() ? w : w.to(x.scalar_type());
}

// The fused path's grouped adapters of `projections` (their columns in order), for concat_linear:
// every A stacked, each B. Undefined when it does not apply: a projection without an adapter,
// scales that differ, or dropout in training (peft's modules each draw their own mask).
grouped_lora lora_group(const std::vector<const projection_impl*>& projections) {
  std::vector<torch::Tensor> as, bs;
  double scaling = 0;
  for (const auto* p : projections) {
    if (!p->lora_a.defined() || (p->is_training() && p->lora_dropout > 0.0)) return {};
    if (!as.empty() && p->lora_scaling != scaling) return {};
    scaling = p->lora_scaling;
    as.push_back(p->lora_a);
    bs.push_back(p->lora_b);
  }
  return {as.size() == 1 ? as[0] : torch::cat(as, 0), std::move(bs), scaling, {}};
}

// grouped_lora::room of `projections`' weights as concat_linear gets them (`weights`): their rows
// and the columns to their right, where each has room (load_frozen laid them out) and they are
// the parameters themselves (x's dtype); else undefined.
torch::Tensor lora_room_of(const std::vector<const projection_impl*>& projections,
                           const std::vector<torch::Tensor>& weights, const grouped_lora& lora) {
  for (std::size_t i = 0; i < projections.size(); ++i) {
    if (!projections[i]->lora_room || !weights[i].is_same(projections[i]->weight)) return {};
  }
  const auto stride = adjacent_row_stride(weights);
  const auto& first = weights.front();
  if (stride < first.size(1) + lora.a.size(0)) return {};
  std::int64_t rows = 0;
  for (const auto& w : weights) rows += w.size(0);
  torch::NoGradGuard no_grad;
  return first.detach().as_strided({rows, stride}, {stride, 1}, first.storage_offset());
}

// One GEMM of several projections' base weights (and biases, where they have them) for x,
// (..., Σ out_i), with their LoRA adapters: grouped inside concat_linear where lora_group applies,
// else each module's term added apart in its own columns (peft's per-module adapters).
torch::Tensor fused_projections(std::initializer_list<projection> projections, const torch::Tensor& x) {
  std::vector<torch::Tensor> weights, biases;
  std::vector<const projection_impl*> modules;
  const bool biased = projections.begin()->get()->bias.defined();
  for (const auto& p : projections) {
    weights.push_back(like(p->weight, x));
    if (biased) biases.push_back(like(p->bias, x));
    modules.push_back(p.get());
  }
  auto lora = lora_group(modules);
  if (lora.defined()) lora.room = lora_room_of(modules, weights, lora);
  const auto fused = concat_linear(x, weights, biases, lora);
  if (lora.defined()) return fused;
  std::vector<torch::Tensor> deltas;
  bool any = false;
  for (auto p : projections) {
    deltas.push_back(p->lora_delta(x));
    any = any || deltas.back().defined();
  }
  if (!any) return fused;
  std::size_t i = 0;
  for (auto p : projections) {
    if (!deltas[i].defined()) {
      auto sizes = fused.sizes().vec();
      sizes.back() = p->out_features;
      deltas[i] = torch::zeros(sizes, fused.options());
    }
    ++i;
  }
  return fused + torch::cat(deltas, -1);
}

// The tanh approximation of GELU under its three names (one formula written three ways).
bool tanh_gelu(const std::string& name) {
  return name == "gelu_new" || name == "gelu_fast" || name == "gelu_pytorch_tanh";
}

// fused: the tanh GELUs as ATen's one-kernel gelu(tanh) instead of the eight elementwise ops of
// transformers' formula (the fused path).
torch::Tensor activate(const std::string& name, const torch::Tensor& x, bool fused) {
  if (fused && tanh_gelu(name)) return torch::gelu(x, "tanh");
  if (name == "gelu_new") {  // NewGELUActivation, written as transformers writes it
    return 0.5 * x * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * torch::pow(x, 3.0))));
  }
  if (name == "gelu_fast") {
    return 0.5 * x * (1.0 + torch::tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)));
  }
  if (name == "gelu") return torch::gelu(x);
  if (name == "gelu_pytorch_tanh") return torch::gelu(x, "tanh");
  if (name == "quick_gelu") return x * torch::sigmoid(1.702 * x);
  if (name == "relu") return torch::relu(x);
  return torch::silu(x);  // silu / swish; parse_config admits no other name
}

// Llama's rotate_half pairs dimension i with i + d/2; GPT-J's rotate_every_two pairs 2i with 2i+1.
torch::Tensor rotate(const torch::Tensor& x, rotary_style style) {  // (..., d)
  const std::int64_t d = x.size(-1);
  if (style == rotary_style::half) {
    return torch::cat({-x.slice(-1, d / 2, d), x.slice(-1, 0, d / 2)}, -1);
  }
  auto even = x.slice(-1, 0, d, 2);
  auto odd = x.slice(-1, 1, d, 2);
  return torch::stack({-odd, even}, -1).flatten(-2);
}

// transformers' rope init functions: default, linear and llama3 (all with attention_scaling 1).
torch::Tensor inverse_frequencies(const model_config& c) {
  const std::int64_t dim = c.rotary_dim;
  auto exps = torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat) / static_cast<double>(dim);
  auto inv = 1.0 / torch::pow(c.rope_theta, exps);  // (dim / 2,) fp32
  const auto& s = c.scaling;
  if (s.type == "linear") return inv / s.factor;
  if (s.type != "llama3") return inv;
  const double old_len = static_cast<double>(s.original_max_positions);
  const double low_wavelen = old_len / s.low_freq_factor;
  const double high_wavelen = old_len / s.high_freq_factor;
  auto wavelen = 2 * M_PI / inv;
  auto scaled = torch::where(wavelen > low_wavelen, inv / s.factor, inv);
  auto smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  auto medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
  return torch::where(medium, smoothed, scaled);
}

}  // namespace

const char* compute_path_name(compute_path path) {
  switch (path) {
    case compute_path::plain:
      return "plain";
    case compute_path::fused:
      return "fused";
    case compute_path::automatic:
      break;
  }
  return "automatic";
}

std::int64_t adjacent_row_stride(const std::vector<torch::Tensor>& weights) {
  const auto& first = weights.at(0);
  if (first.dim() != 2 || first.stride(1) != 1 || first.stride(0) < first.size(1)) return 0;
  const std::int64_t stride = first.stride(0);
  for (std::size_t i = 1; i < weights.size(); ++i) {
    const auto& w = weights[i];
    const auto& before = weights[i - 1];
    const bool adjacent = w.dim() == 2 && w.stride(1) == 1 && w.stride(0) == stride &&
                          w.scalar_type() == first.scalar_type() && w.size(1) == first.size(1) &&
                          w.device() == first.device() && w.storage().is_alias_of(first.storage()) &&
                          w.storage_offset() == before.storage_offset() + before.size(0) * stride;
    if (!adjacent) return 0;
  }
  return stride;
}

torch::Tensor stacked_rows(const std::vector<torch::Tensor>& weights) {
  const auto stride = adjacent_row_stride(weights);
  if (stride == 0) return torch::cat(weights, 0);
  const auto& first = weights.front();
  std::int64_t rows = 0;
  for (const auto& w : weights) rows += w.size(0);
  torch::NoGradGuard no_grad;  // a view for the GEMMs of concat_linear, which make the gradients
  return first.detach().as_strided({rows, first.size(1)}, {stride, 1}, first.storage_offset());
}

compute_path parse_compute_path(const std::string& name, const std::string& field) {
  for (auto p : {compute_path::automatic, compute_path::plain, compute_path::fused}) {
    if (name == compute_path_name(p)) return p;
  }
  throw std::invalid_argument(field + ": '" + name +
                              "' is not a compute path (allowed: automatic, plain, fused)");
}

namespace {

// out = m1 m2 · scale, the scale inside the GEMM (beta 0: out's values are not read).
void scaled_mm_into(torch::Tensor out, const torch::Tensor& m1, const torch::Tensor& m2, double scale) {
  at::addmm_out(out, out, m1, m2, /*beta=*/0, /*alpha=*/scale);
}

// y (N, Σ out) = x wᵀ + bias, into y.
void base_gemm_into(torch::Tensor& y, const torch::Tensor& bias, const torch::Tensor& x,
                    const torch::Tensor& w) {
  gemm::mm_into(y, x, w.t(), false, bias);
}

// Calls f(i, b, row, column) for each adapter's B (out_i, r_i) in order: `row` the first of its
// weight's output rows, `column` the first of its adapter's columns of h (the ranks side by side).
template <class F>
void for_each_b(const std::vector<torch::Tensor>& bs, F&& f) {
  std::int64_t row = 0, column = 0;
  for (std::size_t i = 0; i < bs.size(); ++i) {
    f(i, bs[i], row, column);
    row += bs[i].size(0);
    column += bs[i].size(1);
  }
}

// Each B (out_i, r_i) into the room's columns past `in`: rows of weight i, columns of adapter i
// (the block-diagonal; the rest stays zero). Writing the room is no change to the weights' values:
// below autograd's in-place tracking, so that no saved weight counts as modified.
void write_room(const torch::Tensor& room, std::int64_t in, const std::vector<torch::Tensor>& bs) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  for_each_b(bs, [&](std::size_t, const torch::Tensor& b, std::int64_t row, std::int64_t column) {
    room.narrow(0, row, b.size(0)).narrow(1, in + column, b.size(1)).copy_(b);
  });
}

// Where linear_grads_into puts its gradients: x's at out[x] (none when x < 0) and the weights'
// at out[weights] on, as the autograd function's inputs are numbered.
struct grad_slots {
  int x = 0, weights = 1;
};

// The gradients of y = x Wᵀ, W the weights' rows stacked, from g = dy (..., Σ out_i) and x's rows
// x2: x's (g W, plus dh a where the adapters give dh), and the weights' (gᵀ x) straight into an
// optimizer's fp32 buffer where one holds them all (weight_grad_sink.hpp, none then for
// autograd), else one per weight; each into its slot of `out`.
void linear_grads_into(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list& out,
                       const torch::Tensor& g, const torch::Tensor& x2,
                       const std::vector<torch::Tensor>& weights, const torch::Tensor& dh,
                       const torch::Tensor& a, grad_slots slots = {}) {
  const auto n = weights.size();
  const auto g2 = g.reshape({-1, g.size(-1)});
  const auto stacked = stacked_rows(weights);
  if (slots.x >= 0 && ctx->needs_input_grad(static_cast<std::size_t>(slots.x))) {
    auto in_sizes = g.sizes().vec();
    in_sizes.back() = stacked.size(1);
    auto gx = gemm::mm(g2, stacked).view(in_sizes);  // (..., in)
    if (dh.defined()) gx.view({-1, gx.size(-1)}).addmm_(dh, a);
    out[static_cast<std::size_t>(slots.x)] = gx;
  }
  const auto first = static_cast<std::size_t>(slots.weights);
  bool any_weight = false, every_weight = true;
  for (std::size_t i = 0; i < n; ++i) {
    any_weight = any_weight || ctx->needs_input_grad(first + i);
    every_weight = every_weight && ctx->needs_input_grad(first + i);
  }
  auto target = every_weight ? weight_grad_target_of(stacked) : weight_grad_target{};
  if (target.grad.defined()) {
    gemm::mm_into(target.grad, g2.t(), x2, target.accumulate);
  } else if (any_weight) {
    std::vector<std::int64_t> rows;
    for (const auto& w : weights) rows.push_back(w.size(0));
    const auto gw = gemm::mm(g2.t(), x2).split_with_sizes(rows, 0);
    for (std::size_t i = 0; i < n; ++i) out[first + i] = gw[i];
  }
}

// concat_linear's autograd. The weights, biases, adapters (a then each b) and room come as lists
// (libtorch 1.13 takes no undefined tensor as an input); the backward concatenates the weights
// again instead of keeping their copy, and returns the gradients of x, each weight, each bias, a
// and each b, in that order, and none for the room and the scaling.
class concat_linear_function : public torch::autograd::Function<concat_linear_function> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               torch::TensorList weights, torch::TensorList biases, torch::TensorList lora,
                               torch::TensorList room, double scaling) {
    ctx->saved_data["biased"] = !biases.empty();
    ctx->saved_data["weights"] = static_cast<std::int64_t>(weights.size());
    ctx->saved_data["scaling"] = scaling;
    const auto w = stacked_rows(weights.vec());
    const auto bias = biases.empty() ? torch::Tensor() : torch::cat(biases, 0);
    if (lora.empty()) {
      torch::autograd::variable_list keep{x};
      keep.insert(keep.end(), weights.begin(), weights.end());
      ctx->save_for_backward(keep);
      return gemm::linear(x, w, bias);
    }
    // The base GEMM into an output of its own (not a view, so that the adapters' GEMMs write it
    // in place): the values of linear, with the adapters' term.
    const auto in = x.size(-1);
    const auto x2 = x.reshape({-1, in});
    const auto& a = lora[0];
    const std::vector<torch::Tensor> bs(lora.begin() + 1, lora.end());
    const auto ranks = a.size(0);
    auto sizes = x.sizes().vec();
    sizes.back() = w.size(0);
    auto y = torch::empty(sizes, x.options());
    auto y2 = y.view({-1, w.size(0)});
    torch::Tensor kept_x = x;
    const auto h = torch::empty({x2.size(0), ranks}, x.options());
    scaled_mm_into(h, x2, a.t(), scaling);
    if (!room.empty()) {
      // [x | h | 0] as wide as the room's rows (one copy), then one GEMM with [W | B's | 0]ᵀ.
      const auto width = room[0].size(1);
      std::vector<torch::Tensor> parts{x2, h};
      if (width > in + ranks) parts.push_back(torch::zeros({x2.size(0), width - in - ranks}, x.options()));
      const auto xh = torch::cat(parts, 1);
      kept_x = xh.narrow(1, 0, in);
      write_room(room[0], in, bs);
      base_gemm_into(y2, bias, xh, room[0]);
      ctx->saved_data["room"] = room[0];
    } else {
      base_gemm_into(y2, bias, x2, w);
      for_each_b(bs, [&](std::size_t, const torch::Tensor& b, std::int64_t row, std::int64_t column) {
        y2.narrow(1, row, b.size(0)).addmm_(h.narrow(1, column, b.size(1)), b.t());
      });
    }
    torch::autograd::variable_list keep{kept_x};
    keep.insert(keep.end(), weights.begin(), weights.end());
    keep.push_back(a);
    keep.insert(keep.end(), bs.begin(), bs.end());
    keep.push_back(h);
    ctx->save_for_backward(keep);
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto n = static_cast<std::size_t>(ctx->saved_data["weights"].toInt());
    const auto& x = saved[0];
    const std::vector<torch::Tensor> weights(saved.begin() + 1, saved.begin() + 1 + n);
    const bool biased = ctx->saved_data["biased"].toBool();
    const bool adapted = saved.size() > 1 + n;
    const auto room =
        ctx->saved_data.count("room") > 0 ? ctx->saved_data["room"].toTensor() : torch::Tensor();
    std::vector<std::int64_t> rows;
    for (const auto& w : weights) rows.push_back(w.size(0));
    const auto& g = grads[0];  // (..., sum out_i)
    const auto g2 = g.reshape({-1, g.size(-1)});
    const auto x2 = x.reshape({-1, x.size(-1)});
    // x, the weights, biases, a and the b's, the room and the scaling (no gradient for the last two).
    const std::size_t adapter_grads = adapted ? 1 + n : 0;
    torch::autograd::variable_list out(1 + n + (biased ? n : 0) + adapter_grads + (room.defined() ? 1 : 0) +
                                       1);
    // The adapters: with h = x aᵀ s, dh = g b (each weight's columns by their b) · s; da = dhᵀ x,
    // db_i = g_iᵀ h_i, and x gets dh a.
    torch::Tensor dh;
    if (adapted) dh = adapter_grads_into(ctx, out, saved, n, biased, room, g2, x2);
    linear_grads_into(ctx, out, g, x2, weights, dh, adapted ? saved[1 + n] : torch::Tensor());
    if (biased) {
      const auto gb = g2.sum(0).split_with_sizes(rows, 0);
      for (std::size_t i = 0; i < n; ++i) out[1 + n + i] = gb[i];
    }
    return out;
  }

 private:
  // The adapters' gradients into `out` (a's, then each b's); returns dh (N, Σ r), scaled. `room`:
  // the forward's room, undefined without one.
  static torch::Tensor adapter_grads_into(torch::autograd::AutogradContext* ctx,
                                          torch::autograd::variable_list& out,
                                          const torch::autograd::variable_list& saved, std::size_t n,
                                          bool biased, const torch::Tensor& room, const torch::Tensor& g2,
                                          const torch::Tensor& x2) {
    const auto& a = saved[1 + n];
    const std::vector<torch::Tensor> bs(saved.begin() + 2 + n, saved.begin() + 2 + 2 * n);
    const auto& h = saved[2 + 2 * n];
    const double scaling = ctx->saved_data["scaling"].toDouble();
    const std::size_t at = 1 + n + (biased ? n : 0);
    auto dh = torch::empty({g2.size(0), a.size(0)}, g2.options());
    // The B's block-diagonal lies in the room: one GEMM; else each B's columns apart.
    if (room.defined()) scaled_mm_into(dh, g2, room.narrow(1, x2.size(1), a.size(0)), scaling);
    for_each_b(bs, [&](std::size_t i, const torch::Tensor& b, std::int64_t row, std::int64_t column) {
      const auto g_i = g2.narrow(1, row, b.size(0));
      if (!room.defined()) scaled_mm_into(dh.narrow(1, column, b.size(1)), g_i, b, scaling);
      if (ctx->needs_input_grad(at + 1 + i)) out[at + 1 + i] = g_i.t().mm(h.narrow(1, column, b.size(1)));
    });
    if (ctx->needs_input_grad(at)) out[at] = dh.t().mm(x2);
    return dh;
  }
};

// A Llama MLP, down(silu(gate x) * up x), in cohort's own Hopper GEMM (hopper_gemm.hpp): the
// forward's gate/up projection writes gate_up and h in one kernel (fused_linear_swiglu), then the
// down projection's GEMM; the backward's down-projection input gradient computes SwiGLU's
// backward in its epilogue (fused_swiglu_input_grad), then the weights' and x's gradients as
// concat_linear's. Saves x, the weights, gate_up and h, as the separate ops would.
class swiglu_mlp_function : public torch::autograd::Function<swiglu_mlp_function> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& gate, const torch::Tensor& up,
                               const torch::Tensor& down) {
    auto [gate_up, h] = fused_linear_swiglu(x, gate, up);
    ctx->save_for_backward({x, gate, up, down, gate_up, h});
    return gemm::linear(h, down);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &down = saved[3], &gate_up = saved[4], &h = saved[5];
    torch::autograd::variable_list out(4);  // x, gate, up, down
    const auto& g = grads[0];
    const auto g_gate_up = fused_swiglu_input_grad(g, down, gate_up);
    linear_grads_into(ctx, out, g, h.reshape({-1, h.size(-1)}), {down}, {}, {}, grad_slots{-1, 3});
    linear_grads_into(ctx, out, g_gate_up, x.reshape({-1, x.size(-1)}), {saved[1], saved[2]}, {}, {});
    return out;
  }
};

// Whether the MLP runs as swiglu_mlp_function: where the own GEMM is on (gemm::own_gemm: a training
// job, not a deterministic one), without adapters, biases or dropout, and the build, device and
// shapes allow.
bool swiglu_mlp_applies(const projection_impl& gate, const projection_impl& up, const projection_impl& down,
                        const torch::Tensor& x) {
  for (const auto* p : {&gate, &up, &down}) {
    if (p->lora_a.defined() || p->bias.defined() || p->conv1d) return false;
  }
  return gemm::own_gemm() && !at::globalContext().deterministicAlgorithms() &&
         fused_linear_swiglu_fits(x, gate.weight, up.weight) && fused_swiglu_input_grad_fits(x, down.weight);
}

// Attention's q/k/v projection and Llama's rotary in cohort's own Hopper GEMM (hopper_gemm.hpp):
// the forward writes q and k turned, and v, apart in one kernel (fused_linear_rotary_qkv); the
// backward turns their gradients back in one piece (fused_rotary_qkv_backward), then the weights'
// and x's gradients as concat_linear's. Saves x, the weights and the tables, as the separate ops
// would. Inputs: x, q's, k's and v's weights, their rows stacked (rotary_qkv_weight: no gradient),
// cos and sin (none either).
class rotary_qkv_function : public torch::autograd::Function<rotary_qkv_function> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& wq, const torch::Tensor& wk,
                                                const torch::Tensor& wv, const torch::Tensor& stacked,
                                                const torch::Tensor& cos, const torch::Tensor& sin,
                                                std::int64_t head_dim) {
    ctx->save_for_backward({x, wq, wk, wv, cos, sin});
    ctx->saved_data["head_dim"] = head_dim;
    return fused_linear_rotary_qkv(x, stacked, cos, sin, wq.size(0), wk.size(0), head_dim);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto g_qkv =
        fused_rotary_qkv_backward(grads, saved[4], saved[5], saved[1].size(0), saved[2].size(0),
                                  saved[3].size(0), ctx->saved_data["head_dim"].toInt());
    torch::autograd::variable_list out(8);  // x, the weights, the stacked rows, cos, sin, head_dim
    linear_grads_into(ctx, out, g_qkv, x.reshape({-1, x.size(-1)}), {saved[1], saved[2], saved[3]}, {}, {});
    return out;
  }
};

// q's, k's and v's weights stacked (stacked_rows) where the projection and Llama's rotary run as
// rotary_qkv_function: where the own GEMM is on (gemm::own_gemm: a training job, not a
// deterministic one), without adapters or biases, and the build, device and shapes allow; else
// undefined.
torch::Tensor rotary_qkv_weight(const projection_impl& q, const projection_impl& k, const projection_impl& v,
                                const torch::Tensor& x, std::int64_t head_dim) {
  for (const auto* p : {&q, &k, &v}) {
    if (p->lora_a.defined() || p->bias.defined() || p->conv1d || p->weight.scalar_type() != torch::kBFloat16)
      return {};
  }
  if (!gemm::own_gemm() || !gemm::own_gemm_rotary() || at::globalContext().deterministicAlgorithms() ||
      !hopper_device(x))
    return {};
  auto stacked = stacked_rows({q.weight, k.weight, v.weight});
  return fused_linear_rotary_qkv_fits(x, stacked, q.weight.size(0), k.weight.size(0), head_dim)
             ? stacked
             : torch::Tensor();
}

// chunked_lm_head_loss's autograd: the forward computes the loss and, when `want_grads`, its
// gradients; the backward scales those. The bias comes as a list of none or one. Targets of
// -100 count for nothing.
class chunked_head_loss_function : public torch::autograd::Function<chunked_head_loss_function> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, torch::TensorList biases,
                               const torch::Tensor& targets, std::int64_t chunk_rows,
                               bool want_grads) {
    const torch::Tensor bias = biases.empty() ? torch::Tensor() : biases[0];
    const std::int64_t N = x.size(0);
    const bool want_x = want_grads && x.requires_grad();
    const bool want_w = want_grads && weight.requires_grad();
    const bool want_b = want_grads && bias.defined() && bias.requires_grad();
    const auto fp32 = x.options().dtype(torch::kFloat);
    auto loss = torch::zeros({}, fp32);
    auto gx = want_x ? torch::empty_like(x) : torch::zeros({0}, x.options());
    auto gw = want_w ? torch::zeros(weight.sizes(), fp32) : torch::zeros({0}, fp32);
    auto gb = want_b ? torch::zeros(bias.sizes(), fp32) : torch::zeros({0}, fp32);
    for (std::int64_t start = 0; start < N; start += chunk_rows) {
      const std::int64_t end = std::min(N, start + chunk_rows);
      const auto xc = x.slice(0, start, end);                          // (n, C)
      const auto tc = targets.slice(0, start, end);                     // (n)
      const bool wanted = want_x || want_w || want_b;
      auto logits = gemm::linear(xc, weight, bias);  // (n, V') in x's dtype
      if (fused_kernels_available(logits)) {
        // One kernel: the rows' losses, and the gradient written over the logits (fp32 math,
        // rounded once to x's dtype, as the cast below rounds it), deterministic.
        loss += fused_cross_entropy(logits, tc, wanted);
        if (!wanted) continue;
        if (want_x) gemm::mm_into(gx.slice(0, start, end), logits, weight);
        if (want_w) gemm::mm_into(gw, logits.t(), xc, /*accumulate=*/true);  // fp32 in the GEMM
        if (want_b) gb.add_(logits.to(torch::kFloat).sum(0));
        continue;
      }
      // cross_entropy's own kernels (log-softmax, NLL with ignore_index, and their backwards):
      // the plain path's numbers per row, and deterministic on CUDA.
      const auto logp = torch::log_softmax(logits.to(torch::kFloat), 1);
      const auto nll = at::nll_loss_forward(logp, tc, {}, at::Reduction::Sum, -100);
      loss += std::get<0>(nll);
      if (!wanted) continue;
      // d loss / d logits = softmax - one_hot(target), zero on rows of -100.
      const auto grad_logp = at::nll_loss_backward(torch::ones({}, fp32), logp, tc, {},
                                                   at::Reduction::Sum, -100, std::get<1>(nll));
      const auto g = at::_log_softmax_backward_data(grad_logp, logp, 1, torch::kFloat);  // (n, V')
      const auto gc = g.to(x.scalar_type());
      if (want_x) gx.slice(0, start, end).copy_(gc.mm(weight));
      if (want_w) gw.add_(gc.t().mm(xc));
      if (want_b) gb.add_(g.sum(0));
    }
    if (want_w) gw = gw.to(weight.scalar_type());
    if (want_b) gb = gb.to(bias.scalar_type());
    ctx->save_for_backward({gx, gw, gb});
    ctx->saved_data["x"] = want_x;
    ctx->saved_data["w"] = want_w;
    ctx->saved_data["b"] = want_b;
    ctx->saved_data["biased"] = bias.defined();
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& scale = grads[0];  // scalar fp32
    const auto scaled = [&](const torch::Tensor& t, const char* wanted) {
      return ctx->saved_data[wanted].toBool() ? t * scale.to(t.scalar_type()) : torch::Tensor();
    };
    // x, weight, [bias], targets, chunk_rows, want_grads
    torch::autograd::variable_list out{scaled(saved[0], "x"), scaled(saved[1], "w")};
    if (ctx->saved_data["biased"].toBool()) out.push_back(scaled(saved[2], "b"));
    out.insert(out.end(), {torch::Tensor(), torch::Tensor(), torch::Tensor()});
    return out;
  }
};

// labels (B, T) -> (B, T): position t holds labels[t + 1], the last position -100.
torch::Tensor shifted_targets(const torch::Tensor& labels) {
  const std::int64_t T = labels.size(1);
  return torch::cat({labels.slice(1, 1, T), torch::full({labels.size(0), 1}, -100, labels.options())},
                    1);
}

}  // namespace

torch::Tensor concat_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                            const std::vector<torch::Tensor>& biases, const grouped_lora& lora) {
  if (weights.empty() || (!biases.empty() && biases.size() != weights.size())) {
    throw model_error(model_errc::bad_input, "concat_linear takes one weight or more and as many "
                                             "biases or none");
  }
  std::vector<torch::Tensor> adapters, room;
  if (lora.defined()) {
    adapters.push_back(lora.a);
    adapters.insert(adapters.end(), lora.b.begin(), lora.b.end());
    if (lora.room.defined()) room.push_back(lora.room);
  }
  return concat_linear_function::apply(x, torch::TensorList(weights), torch::TensorList(biases),
                                       torch::TensorList(adapters), torch::TensorList(room), lora.scaling);
}

torch::Tensor chunked_lm_head_loss(const torch::Tensor& x, const torch::Tensor& weight,
                                   const torch::Tensor& bias, const torch::Tensor& targets,
                                   std::int64_t chunk_rows) {
  if (x.dim() != 2 || weight.dim() != 2 || x.size(1) != weight.size(1)) {
    throw model_error(model_errc::bad_input, "chunked_lm_head_loss: x must be (N, C) and the "
                                             "weight (V, C)");
  }
  if (targets.dim() != 1 || targets.size(0) != x.size(0)) {
    throw model_error(model_errc::bad_input, "chunked_lm_head_loss: targets must be (N,) for x (N, C)");
  }
  if (chunk_rows < 1) {
    throw model_error(model_errc::bad_input, "chunked_lm_head_loss: chunk_rows must be >= 1, not " +
                                                 std::to_string(chunk_rows));
  }
  const bool want_grads = torch::GradMode::is_enabled() &&
                          (x.requires_grad() || weight.requires_grad() ||
                           (bias.defined() && bias.requires_grad()));
  std::vector<torch::Tensor> biases;
  if (bias.defined()) biases.push_back(bias);
  return chunked_head_loss_function::apply(x, weight, torch::TensorList(biases), targets, chunk_rows,
                                           want_grads);
}

const torch::Tensor& attention_context::mask(std::int64_t window) const {
  for (const auto& [w, m] : masks) {
    if (w == window) return m;
  }
  throw model_error(model_errc::bad_input, "attention context has no mask for window " +
                                               std::to_string(window));
}

namespace {

// Set while make_placeholder_decoder builds a model: weights are placeholders, not allocations.
thread_local bool building_placeholders = false;

// A new weight of `shape`: uninitialised memory, or a one-element placeholder expanded to the shape.
torch::Tensor new_weight(torch::IntArrayRef shape, const torch::TensorOptions& options) {
  if (building_placeholders) return torch::zeros({1}, options).expand(shape);
  return torch::empty(shape, options);
}

}  // namespace

projection_impl::projection_impl(std::int64_t in, std::int64_t out, bool with_bias, bool conv,
                                 const torch::TensorOptions& options)
    : conv1d(conv), in_features(in), out_features(out) {
  weight = register_parameter("weight", conv ? new_weight({in, out}, options)
                                              : new_weight({out, in}, options));
  if (with_bias) bias = register_parameter("bias", new_weight({out}, options));
}

torch::Tensor projection_impl::forward(const torch::Tensor& x) {
  if (!conv1d && lora_a.defined() && fused_for(path, x)) {
    const auto lora = lora_group({this});
    if (lora.defined())
      return concat_linear(
          x, {like(weight, x)},
          bias.defined() ? std::vector<torch::Tensor>{like(bias, x)} : std::vector<torch::Tensor>{}, lora);
  }
  if (!conv1d && !bias.defined() && weight.requires_grad() && fused_for(path, x))
    return with_adapter(concat_linear(x, {like(weight, x)}, {}, {}), x);  // see weight_grad_sink.hpp
  if (!conv1d) return with_adapter(torch::linear(x, like(weight, x), like(bias, x)), x);
  if (bias.defined() && fused_for(path, x) && fused_kernels_available(x)) {
    // The bias added by the GEMM itself, its gradient summed by cohort's kernel.
    return with_adapter(fused_biased_matmul(x, like(weight, x), like(bias, x)), x);
  }
  if (bias.defined() && fused_for(path, x)) {  // the bias added by the GEMM itself
    auto sizes = x.sizes().vec();
    sizes.back() = weight.size(1);
    return with_adapter(torch::addmm(like(bias, x), x.reshape({-1, x.size(-1)}), like(weight, x)).view(sizes),
                        x);
  }
  auto y = torch::matmul(x, like(weight, x));  // Conv1D: x @ W + b with W (in, out)
  return with_adapter(bias.defined() ? y + like(bias, x) : y, x);
}

torch::Tensor projection_impl::with_adapter(const torch::Tensor& y, const torch::Tensor& x) {
  if (!lora_a.defined()) return y;
  if (fused_for(path, x)) {  // a Conv1D's adapters (its weight is (in, out), not concat_linear's)
    const auto lora = lora_group({this});
    if (lora.defined()) {
      const auto h = torch::linear(x, lora.a) * lora.scaling;
      return torch::addmm(y.reshape({-1, y.size(-1)}), h.reshape({-1, h.size(-1)}), lora.b[0].t())
          .view(y.sizes());
    }
  }
  return y + lora_delta(x);
}

torch::Tensor projection_impl::lora_delta(const torch::Tensor& x) {
  if (!lora_a.defined()) return {};
  const auto h = torch::dropout(x, lora_dropout, is_training() && lora_dropout > 0.0);
  return torch::linear(torch::linear(h, lora_a), lora_b) * lora_scaling;  // peft: B(A(drop(x))) · s
}

norm_impl::norm_impl(const model_config& c, const torch::TensorOptions& options)
    : kind(c.norm), eps(c.norm_eps) {
  if (!c.norm_affine) return;
  weight = register_parameter("weight", new_weight({c.hidden_size}, options));
  if (kind == norm_kind::layer_norm) {
    bias = register_parameter("bias", new_weight({c.hidden_size}, options));
  }
}

bool norm_impl::own_kernel(const torch::Tensor& x) const {
  return fused_for(path, x) && fused_norm_available(x);
}

torch::Tensor norm_impl::forward(const torch::Tensor& x) {
  if (own_kernel(x)) return fused_norm(x, {}, like(weight, x), like(bias, x), kind == norm_kind::layer_norm, eps)[0];
  if (kind == norm_kind::layer_norm) return torch::layer_norm(x, {x.size(-1)}, like(weight, x), like(bias, x), eps);
  if (compat::has_rms_norm && fused_for(path, x)) return compat::rms_norm(x, like(weight, x), eps);
  auto h = x.to(torch::kFloat);
  h = h * torch::rsqrt(h.pow(2).mean(-1, true) + eps);
  return like(weight, x) * h.to(x.scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> norm_impl::add_forward(const torch::Tensor& x, const torch::Tensor& delta) {
  if (own_kernel(x) && delta.sizes() == x.sizes() && delta.scalar_type() == x.scalar_type()) {
    auto out = fused_norm(x, delta, like(weight, x), like(bias, x), kind == norm_kind::layer_norm, eps);
    return {out[1], out[0]};
  }
  auto h = x + delta;
  return {h, forward(h)};
}

attention_impl::attention_impl(const model_config& c, std::int64_t layer,
                               const torch::TensorOptions& options)
    : layer_(layer),
      heads_(c.num_heads),
      kv_heads_(c.num_kv_heads),
      head_dim_(c.head_dim),
      rotary_dim_(c.rotary_dim),
      window_(c.sliding_window.at(static_cast<std::size_t>(layer))),
      rotary_(c.rotary),
      attn_dropout_(c.attention_dropout),
      resid_dropout_(c.residual_dropout),
      fp32_scores_(c.fam == family::gptj) {
  const std::int64_t q_out = heads_ * head_dim_, kv_out = kv_heads_ * head_dim_;
  if (c.conv1d) {
    qkv = register_module("qkv", projection(c.hidden_size, q_out + 2 * kv_out, c.qkv_bias, true, options));
  } else {
    q = register_module("q", projection(c.hidden_size, q_out, c.qkv_bias, false, options));
    k = register_module("k", projection(c.hidden_size, kv_out, c.qkv_bias, false, options));
    v = register_module("v", projection(c.hidden_size, kv_out, c.qkv_bias, false, options));
  }
  o = register_module("o", projection(q_out, c.hidden_size, c.o_bias, c.conv1d, options));
  scale_ = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  if (c.fam == family::gpt2) {  // GPT2Attention: optional 1/sqrt(d) and 1/(layer_idx + 1)
    if (!c.scale_attn_weights) scale_ = 1.0;
    if (c.scale_attn_by_inverse_layer_idx) scale_ /= static_cast<double>(layer + 1);
  }
}

std::vector<torch::Tensor> attention_impl::fused_qkv(const torch::Tensor& x, const attention_context& ctx,
                                                     bool& rotated) {
  const bool llama_rotary = rotary_ == rotary_style::half && rotary_dim_ == head_dim_;
  rotated = false;
  if (llama_rotary) {
    if (const auto stacked = rotary_qkv_weight(*q, *k, *v, x, head_dim_); stacked.defined()) {
      rotated = true;
      return rotary_qkv_function::apply(x, q->weight, k->weight, v->weight, stacked, ctx.cos, ctx.sin,
                                        head_dim_);
    }
  }
  // The adapters add to q, k, v before rotary.
  const auto qkv_out = fused_projections({q, k, v}, x);
  const std::int64_t q_cols = heads_ * head_dim_, kv_cols = kv_heads_ * head_dim_;
  if (llama_rotary && fused_kernels_available(x)) {
    // Rotary on q's and k's heads in one kernel each way, q, k and v apart after it (v copied
    // through), so that their gradients come back together in the backward's one kernel.
    rotated = true;
    return fused_rotary_qkv(qkv_out, ctx.cos, ctx.sin, q_cols, kv_cols, head_dim_);
  }
  return qkv_out.split_with_sizes({q_cols, kv_cols, kv_cols}, -1);
}

torch::Tensor attention_impl::forward(const torch::Tensor& x, const attention_context& ctx) {
  const std::int64_t B = x.size(0), T = x.size(1);
  torch::Tensor qs, ks, vs;
  bool rotated = false;  // the fused kernel applied rotary already
  if (qkv) {
    auto parts = qkv->forward(x).split_with_sizes(
        {heads_ * head_dim_, kv_heads_ * head_dim_, kv_heads_ * head_dim_}, -1);
    qs = parts[0], ks = parts[1], vs = parts[2];
  } else if (fused_for(path, x)) {
    const auto parts = fused_qkv(x, ctx, rotated);
    qs = parts[0], ks = parts[1], vs = parts[2];
  } else {
    qs = q->forward(x), ks = k->forward(x), vs = v->forward(x);
  }
  qs = qs.view({B, T, heads_, head_dim_});  // (B, T, H, D)
  ks = ks.view({B, T, kv_heads_, head_dim_});
  vs = vs.view({B, T, kv_heads_, head_dim_});
  if (rotary_ != rotary_style::none && !rotated) {
    auto cos = ctx.cos.to(x.scalar_type()).view({1, T, 1, rotary_dim_});
    auto sin = ctx.sin.to(x.scalar_type()).view({1, T, 1, rotary_dim_});
    const auto apply = [&](const torch::Tensor& t) {
      auto r = t.slice(-1, 0, rotary_dim_);
      auto rotated = r * cos + rotate(r, rotary_) * sin;
      if (rotary_dim_ == head_dim_) return rotated;
      return torch::cat({rotated, t.slice(-1, rotary_dim_, head_dim_)}, -1);
    };
    qs = apply(qs), ks = apply(ks);
  }
  qs = qs.transpose(1, 2), ks = ks.transpose(1, 2), vs = vs.transpose(1, 2);  // (B, H, T, D)
  if (ctx.cache != nullptr) {  // keys and values of every position so far: (B, H_kv, P + T, D)
    auto& keys = ctx.cache->keys.at(static_cast<std::size_t>(layer_));
    auto& values = ctx.cache->values.at(static_cast<std::size_t>(layer_));
    if (ctx.cache->capacity > 0) {  // preallocated: written in place, read whole under the mask
      keys.index_copy_(2, ctx.positions, ks);
      values.index_copy_(2, ctx.positions, vs);
    } else {
      keys = keys.defined() ? torch::cat({keys, ks}, 2) : ks;
      values = values.defined() ? torch::cat({values, vs}, 2) : vs;
    }
    ks = keys, vs = values;
  }
  // With kv_heads_ < heads_ each key/value head serves heads/kv_heads queries: attention() reads
  // them so, without a repeated copy where the library can.
  const torch::Tensor no_mask;
  const torch::Tensor& mask = window_ > 0 || ctx.cache != nullptr ? ctx.mask(window_) : no_mask;
  const double p = is_training() ? attn_dropout_ : 0.0;
  torch::Tensor y;
  if (fp32_scores_ && x.scalar_type() != torch::kFloat) {
    y = compat::attention(qs.to(torch::kFloat), ks.to(torch::kFloat), vs.to(torch::kFloat), mask,
                          scale_, p).to(x.scalar_type());
  } else {
    y = compat::attention(qs, ks, vs, mask, scale_, p);
  }
  y = o->forward(y.transpose(1, 2).reshape({B, T, heads_ * head_dim_}));
  return torch::dropout(y, resid_dropout_, is_training() && resid_dropout_ > 0.0);
}

mlp_impl::mlp_impl(const model_config& c, const torch::TensorOptions& options)
    : activation_(c.activation),
      act_dropout_(c.activation_dropout),
      resid_dropout_(c.residual_dropout) {
  const std::int64_t h = c.hidden_size, i = c.intermediate_size;
  if (c.gated_mlp) gate = register_module("gate", projection(h, i, c.mlp_bias, false, options));
  up = register_module("up", projection(h, i, c.mlp_bias, c.conv1d, options));
  down = register_module("down", projection(i, h, c.mlp_bias, c.conv1d, options));
}

torch::Tensor mlp_impl::forward(const torch::Tensor& x) {
  const bool train = is_training();
  torch::Tensor h;
  const bool silu = activation_ == "silu" || activation_ == "swish";
  const bool no_dropout = !train || (act_dropout_ == 0.0 && resid_dropout_ == 0.0);
  if (gate && silu && no_dropout && fused_for(path, x) && swiglu_mlp_applies(*gate, *up, *down, x)) {
    return swiglu_mlp_function::apply(x, gate->weight, up->weight, down->weight);
  }
  if (gate && !up->conv1d && fused_for(path, x)) {  // one GEMM for gate and up
    auto gate_up = fused_projections({gate, up}, x);
    if (silu && fused_kernels_available(x)) {
      h = fused_swiglu(gate_up);  // one kernel each way; saves gate_up only
    } else {
      auto parts = gate_up.chunk(2, -1);
      h = activate(activation_, parts[0], /*fused=*/true) * parts[1];
    }
  } else if (!gate && tanh_gelu(activation_) && fused_for(path, x) && fused_kernels_available(x) &&
             up->bias.defined() && !up->lora_a.defined()) {
    // GPT-2's up projection and GELU: the bias's gradient summed in GELU's backward kernel.
    h = fused_biased_gelu(x, like(up->weight, x), like(up->bias, x), up->conv1d);
  } else {
    const bool fused = fused_for(path, x);
    h = gate ? activate(activation_, gate->forward(x), fused) * up->forward(x)
             : activate(activation_, up->forward(x), fused);
  }
  h = torch::dropout(h, act_dropout_, train && act_dropout_ > 0.0);
  return torch::dropout(down->forward(h), resid_dropout_, train && resid_dropout_ > 0.0);
}

decoder_layer_impl::decoder_layer_impl(const model_config& c, std::int64_t layer,
                                       const torch::TensorOptions& options)
    : parallel_residual_(c.parallel_residual), norm_before_(c.norm_before) {
  norm1 = register_module("norm1", norm(c, options));
  attn = register_module("attn", attention(c, layer, options));
  if (!c.parallel_residual) norm2 = register_module("norm2", norm(c, options));
  ffn = register_module("ffn", mlp(c, options));
}

residual_stream decoder_layer_impl::forward(const residual_stream& in, const attention_context& ctx) {
  if (parallel_residual_) {  // GPT-J: one norm feeds both branches
    const auto x = in.sum();
    auto h = norm1->forward(x);
    return {attn->forward(h, ctx) + ffn->forward(h) + x, {}};
  }
  if (!norm_before_) {  // OPT with do_layer_norm_before = false (opt-350m): post-norm
    const auto x = in.sum();
    auto h = norm1->add_forward(x, attn->forward(x, ctx)).second;
    return {norm2->add_forward(h, ffn->forward(h)).second, {}};
  }
  // Each residual add inside the norm after it, one kernel each way on the fused path: the
  // previous layer's pending add in the first norm, the attention's in the second; the MLP's
  // stays pending for the next layer.
  auto [x, normed1] = in.delta.defined() ? norm1->add_forward(in.base, in.delta)
                                         : std::make_pair(in.base, norm1->forward(in.base));
  auto [h, normed2] = norm2->add_forward(x, attn->forward(normed1, ctx));
  return {h, ffn->forward(normed2)};
}

torch::Tensor decoder_layer_impl::forward(const torch::Tensor& x, const attention_context& ctx) {
  return forward(residual_stream{x, {}}, ctx).sum();
}

decoder_impl::decoder_impl(model_config c, const torch::TensorOptions& options, bool initialize)
    : config_(std::move(c)) {
  const auto& cfg = config_;
  const hf_layout names = layout_of(cfg.fam);
  const bool project = cfg.word_embed_proj_dim > 0 && cfg.word_embed_proj_dim != cfg.hidden_size;
  const std::int64_t embed_dim = project ? cfg.word_embed_proj_dim : cfg.hidden_size;
  embed_tokens_ = register_parameter("embed_tokens", new_weight({cfg.vocab_size, embed_dim}, options));
  list(names.embed + ".weight", embed_tokens_, -1);
  if (cfg.learned_positions) {
    embed_positions_ = register_parameter(
        "embed_positions",
        new_weight({cfg.max_positions + cfg.position_offset, cfg.hidden_size}, options));
    list(names.positions + ".weight", embed_positions_, -1);
  }
  if (project) {
    project_in_ = register_module("project_in", projection(embed_dim, cfg.hidden_size, false, false, options));
    list(names.project_in + ".weight", project_in_->weight, -1);
  }
  for (std::int64_t i = 0; i < cfg.num_layers; ++i) {
    auto layer = register_module("layer" + std::to_string(i), decoder_layer(cfg, i, options));
    layers_.push_back(layer);
    const std::string prefix = names.layers + std::to_string(i) + ".";
    const auto add_norm = [&](const norm& n, const std::string& name) {
      if (n && n->weight.defined()) list(prefix + name + ".weight", n->weight, i);
      if (n && n->bias.defined()) list(prefix + name + ".bias", n->bias, i);
    };
    const auto add_proj = [&](const projection& p, const std::string& name) {
      if (!p) return;
      projections_.push_back({prefix + name, p, i});
      list(prefix + name + ".weight", p->weight, i);
      if (p->bias.defined()) list(prefix + name + ".bias", p->bias, i);
    };
    add_norm(layer->norm1, names.norm1);
    add_proj(layer->attn->qkv, names.qkv);
    add_proj(layer->attn->q, names.q);
    add_proj(layer->attn->k, names.k);
    add_proj(layer->attn->v, names.v);
    add_proj(layer->attn->o, names.o);
    add_norm(layer->norm2, names.norm2);
    add_proj(layer->ffn->gate, names.gate);
    add_proj(layer->ffn->up, names.up);
    add_proj(layer->ffn->down, names.down);
  }
  if (cfg.final_norm) {
    final_norm_ = register_module("final_norm", norm(cfg, options));
    if (final_norm_->weight.defined()) list(names.final_norm + ".weight", final_norm_->weight, -1);
    if (final_norm_->bias.defined()) list(names.final_norm + ".bias", final_norm_->bias, -1);
  }
  if (project) {
    project_out_ = register_module("project_out", projection(cfg.hidden_size, embed_dim, false, false, options));
    list(names.project_out + ".weight", project_out_->weight, -1);
  }
  if (cfg.num_labels > 0) {  // a sequence classifier: the score head, no LM head
    score_weight_ = register_parameter("score", new_weight({cfg.num_labels, embed_dim}, options));
    list("score.weight", score_weight_, -1);
  } else if (cfg.tie_word_embeddings) {
    lm_head_weight_ = embed_tokens_;
  } else {
    lm_head_weight_ = register_parameter("lm_head", new_weight({cfg.vocab_size, embed_dim}, options));
    list("lm_head.weight", lm_head_weight_, -1);
  }
  if (cfg.lm_head_bias && cfg.num_labels == 0) {
    lm_head_bias_ = register_parameter("lm_head_bias", new_weight({cfg.vocab_size}, options));
    list("lm_head.bias", lm_head_bias_, -1);
  }
  if (!initialize || embed_tokens_.is_meta() || building_placeholders) return;
  torch::NoGradGuard no_grad;  // transformers' _init_weights
  const double std = cfg.initializer_range;
  for (const auto& m : modules(false)) {
    if (auto* p = m->as<projection_impl>()) {
      p->weight.normal_(0.0, std);
      if (p->bias.defined()) p->bias.zero_();
    } else if (auto* n = m->as<norm_impl>()) {
      if (n->weight.defined()) n->weight.fill_(1.0);
      if (n->bias.defined()) n->bias.zero_();
    }
  }
  embed_tokens_.normal_(0.0, std);
  if (cfg.pad_token_id && has_embedding_padding_idx(cfg.fam)) embed_tokens_[*cfg.pad_token_id].zero_();
  if (embed_positions_.defined()) embed_positions_.normal_(0.0, std);
  if (score_weight_.defined()) score_weight_.normal_(0.0, std);
  if (lm_head_weight_.defined() && !cfg.tie_word_embeddings) lm_head_weight_.normal_(0.0, std);
  if (lm_head_bias_.defined()) lm_head_bias_.zero_();
}

void decoder_impl::list(const std::string& name, const torch::Tensor& t, std::int64_t layer) {
  hf_params_.push_back({name, t, layer});
}

void decoder_impl::add_lora(const lora_config& config, torch::ScalarType dtype) {
  if (has_lora()) throw model_error(model_errc::bad_input, "add_lora: the model has LoRA adapters already");
  check_lora_config(config, config_.fam);
  for (auto& p : parameters()) p.set_requires_grad(false);
  const auto options = hf_params_.front().tensor.options().dtype(dtype);
  for (auto& [module, proj, layer] : projections_) {
    const auto last = module.substr(module.rfind('.') + 1);
    const auto& targets = config.target_modules;
    if (std::find(targets.begin(), targets.end(), last) == targets.end()) continue;
    // A (r, in) and B (out, r) whatever the weight's layout, as peft's LoRA layer has them.
    proj->lora_a = proj->register_parameter("lora_A", torch::empty({config.r, proj->in_features}, options));
    proj->lora_b = proj->register_parameter("lora_B", torch::empty({proj->out_features, config.r}, options));
    proj->lora_scaling = config.scaling();
    proj->lora_dropout = config.dropout;
    lora_params_.push_back({lora_a_name(module), proj->lora_a, layer});
    lora_params_.push_back({lora_b_name(module), proj->lora_b, layer});
  }
  lora_ = config;
  activation_dtype_ = dtype;
}

namespace {

// The projections of `layer` that the fused path computes as one GEMM (fused_projections: q, k,
// v; gate, up) whose adapters it groups there: each frozen, with an adapter, of one scale and
// one input width.
std::vector<std::vector<projection>> lora_room_groups(const decoder_layer& layer) {
  std::vector<std::vector<projection>> candidates, groups;
  const auto& attn = layer->attn;
  if (!attn->qkv && attn->q) candidates.push_back({attn->q, attn->k, attn->v});
  const auto& ffn = layer->ffn;
  if (ffn->gate && !ffn->up->conv1d) candidates.push_back({ffn->gate, ffn->up});
  for (auto& group : candidates) {
    bool fits = true;
    for (const auto& p : group) {
      fits = fits && p->lora_a.defined() && !p->conv1d && !p->weight.requires_grad() &&
             p->lora_scaling == group.front()->lora_scaling && p->in_features == group.front()->in_features;
    }
    if (fits) groups.push_back(std::move(group));
  }
  return groups;
}

// Where load_frozen puts a weight in its layer's buffer: from `offset`, contiguous (row_stride
// 0) or its rows `row_stride` apart (a room group's block).
struct frozen_place {
  std::int64_t offset = 0, row_stride = 0;
};

constexpr std::int64_t round_up(std::int64_t n, std::int64_t to) { return (n + to - 1) / to * to; }

// The places of `params` (a layer's frozen weights) in hf_parameters() order, each room group's
// members together (from a multiple of 8 elements, 16 bytes in bf16, at lora_room_row_stride),
// and the buffer's element count.
std::pair<std::map<const c10::TensorImpl*, frozen_place>, std::int64_t> frozen_places(
    const std::vector<hf_parameter>& params, const std::vector<std::vector<projection>>& groups) {
  std::map<const c10::TensorImpl*, std::size_t> group_of;
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (const auto& p : groups[g]) group_of[p->weight.unsafeGetTensorImpl()] = g;
  std::map<const c10::TensorImpl*, frozen_place> places;
  std::int64_t at = 0;
  for (const auto& p : params) {
    const auto* impl = p.tensor.unsafeGetTensorImpl();
    if (places.count(impl) > 0) continue;  // a room group's member placed with its group
    const auto group = group_of.find(impl);
    if (group == group_of.end()) {
      places[impl] = {at, 0};
      at += p.tensor.numel();
      continue;
    }
    const auto& members = groups[group->second];
    std::int64_t ranks = 0;
    for (const auto& m : members) ranks += m->lora_a.size(0);
    const std::int64_t stride = lora_room_row_stride(members.front()->in_features, ranks);
    at = round_up(at, 8);
    for (const auto& m : members) {
      places[m->weight.unsafeGetTensorImpl()] = {at, stride};
      at += m->out_features * stride;
    }
  }
  return {std::move(places), at};
}

}  // namespace

void decoder_impl::load_frozen(const weight_source& source, torch::ScalarType dtype,
                               const torch::Device& device) {
  torch::NoGradGuard no_grad;
  std::map<std::int64_t, std::vector<hf_parameter>> layers;
  for (const auto& p : hf_params_)
    if (!p.tensor.requires_grad()) layers[p.layer].push_back(p);
  // A base held in another dtype than the activations is converted for each call (like()): its
  // weights are not the GEMM's operands, and no room would be used.
  const bool roomy = !activation_dtype_ || *activation_dtype_ == dtype;
  for (const auto& [layer, params] : layers) {
    const auto groups = roomy && layer >= 0 ? lora_room_groups(layers_.at(static_cast<std::size_t>(layer)))
                                            : std::vector<std::vector<projection>>{};
    const auto [places, numel] = frozen_places(params, groups);
    // Zeros: a room's columns past the B's block-diagonal stay so.
    const auto buffer = torch::zeros({numel}, torch::TensorOptions().dtype(dtype).device(device));
    for (const auto& p : params) {
      const auto place = places.at(p.tensor.unsafeGetTensorImpl());
      torch::Tensor param = p.tensor;  // shares the parameter's implementation (a tied head too)
      if (place.row_stride == 0) {
        auto value = buffer.narrow(0, place.offset, p.tensor.numel()).view(p.tensor.sizes());
        fill_parameter(source, p.name, value);
        param.set_data(value);
        continue;
      }
      auto value = buffer.as_strided(p.tensor.sizes(), {place.row_stride, 1}, place.offset);
      auto read = torch::empty(p.tensor.sizes(), buffer.options());  // fill_parameter's contiguous copy
      fill_parameter(source, p.name, read);
      value.copy_(read);
      param.set_data(value);
    }
    for (const auto& group : groups)
      for (auto member : group) member->lora_room = true;
  }
}

const torch::Tensor& decoder_impl::hf_tensor(const std::string& name) const {
  for (const auto& p : hf_params_) {
    if (p.name == name) return p.tensor;
  }
  throw model_error(model_errc::bad_weights, std::string("a ") + family_name(config_.fam) +
                                                 " model has no weight named '" + name + "'");
}

std::int64_t decoder_impl::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& p : hf_params_) n += p.tensor.numel();
  return n;
}

void check_token_ids(const torch::Tensor& ids, const char* what, std::int64_t vocab_size,
                     bool allow_ignore) {
  if (!ids.defined() || ids.dim() != 2 || ids.scalar_type() != torch::kInt64) {
    throw model_error(model_errc::bad_input, std::string(what) + " must be a (batch, time) int64 tensor");
  }
  if (ids.numel() == 0) throw model_error(model_errc::bad_input, std::string(what) + " is empty");
  auto bad = ids.ge(vocab_size).logical_or(ids.lt(0));
  if (allow_ignore) bad = bad.logical_and(ids.ne(-100));
  if (bad.any().item<bool>()) {
    auto idx = bad.nonzero()[0];
    const auto b = idx[0].item<std::int64_t>(), t = idx[1].item<std::int64_t>();
    throw model_error(model_errc::bad_input,
                      std::string(what) + "[" + std::to_string(b) + "][" + std::to_string(t) + "] = " +
                          std::to_string(ids[b][t].item<std::int64_t>()) +
                          " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")" +
                          (allow_ignore ? " and is not -100" : ""));
  }
}

void decoder_impl::check_ids(const torch::Tensor& ids, const char* what, bool allow_ignore) const {
  check_token_ids(ids, what, config_.vocab_size, allow_ignore);
  check_length(ids.size(1), what);
}

void decoder_impl::check_length(std::int64_t T, const char* what) const {
  if (config_.learned_positions && T > config_.max_positions) {
    throw model_error(model_errc::bad_input, std::string(what) + " has " + std::to_string(T) +
                                                 " positions; this model has learned positions for at most " +
                                                 std::to_string(config_.max_positions));
  }
}

torch::Tensor decoder_impl::embed(const torch::Tensor& input_ids, std::int64_t past) {
  check_ids(input_ids, "input_ids", false);
  const std::int64_t T = input_ids.size(1);
  return embed_at(input_ids, embed_positions_.defined() ? torch::arange(past, past + T, input_ids.options())
                                                        : torch::Tensor());
}

torch::Tensor decoder_impl::embed_checked(const torch::Tensor& input_ids) {
  if (input_ids.dim() != 2)
    throw model_error(model_errc::bad_input, "input_ids must be a (batch, time) int64 tensor");
  const std::int64_t T = input_ids.size(1);
  check_length(T, "input_ids");
  return embed_at(input_ids,
                  embed_positions_.defined() ? torch::arange(T, input_ids.options()) : torch::Tensor());
}

torch::Tensor decoder_impl::embed_at(const torch::Tensor& input_ids, const torch::Tensor& positions) {
  const std::int64_t pad =
      config_.pad_token_id && has_embedding_padding_idx(config_.fam) ? *config_.pad_token_id : -1;
  auto x = torch::embedding(embed_tokens_, input_ids, pad);  // (B, T, E); pad row gets no grad
  if (activation_dtype_) x = x.to(*activation_dtype_);
  if (project_in_) x = project_in_->forward(x);
  if (embed_positions_.defined()) {
    const auto rows = config_.position_offset == 0 ? positions : positions + config_.position_offset;
    x = x + like(torch::embedding(embed_positions_, rows), x);  // (T, C) broadcast over B
  }
  return torch::dropout(x, config_.embed_dropout, is_training() && config_.embed_dropout > 0.0);
}

namespace {

// The (T, S) masks of every window the layers use, true = may attend, for queries at positions
// `queries` (T) against keys at positions `keys` (S), int64 on one device; with `causal`, window
// 0's too. A window that has its mask already is skipped.
void add_masks(attention_context& ctx, const std::vector<std::int64_t>& windows, const torch::Tensor& queries,
               const torch::Tensor& keys, bool causal) {
  torch::Tensor diff;  // query - key
  for (std::int64_t w : windows) {
    bool have = w == 0 && !causal;
    for (const auto& m : ctx.masks) have = have || m.first == w;
    if (have) continue;
    if (!diff.defined()) diff = queries.view({-1, 1}) - keys.view({1, -1});
    auto allowed = diff.ge(0);
    if (w > 0) allowed = allowed.logical_and(diff.lt(w));  // sliding_window_overlay
    ctx.masks.emplace_back(w, allowed);
  }
}

// add_masks for the positions past, …, past + T - 1 against keys 0, …, past + T - 1; no positions
// are made when no mask is wanted (plain causal attention without a cache needs none).
void add_masks(attention_context& ctx, const std::vector<std::int64_t>& windows, std::int64_t T,
               const torch::Device& device, bool causal) {
  const bool wanted = causal || std::any_of(windows.begin(), windows.end(), [](std::int64_t w) { return w > 0; });
  if (!wanted) return;
  const auto longs = torch::TensorOptions().dtype(torch::kInt64).device(device);
  add_masks(ctx, windows, torch::arange(ctx.past, ctx.past + T, longs), torch::arange(ctx.past + T, longs), causal);
}

}  // namespace

attention_context decoder_impl::context(std::int64_t T, const torch::Device& device,
                                        std::int64_t past) const {
  attention_context ctx;
  ctx.past = past;
  if (config_.rotary != rotary_style::none) {
    auto pos = torch::arange(past, past + T, torch::TensorOptions().dtype(torch::kFloat).device(device));
    std::tie(ctx.cos, ctx.sin) = rotary_tables(pos, inverse_frequencies(config_).to(device));
  }
  add_masks(ctx, config_.sliding_window, T, device, past > 0);
  return ctx;
}

std::pair<torch::Tensor, torch::Tensor> decoder_impl::rotary_tables(const torch::Tensor& positions,
                                                                    const torch::Tensor& inv) const {
  auto freqs = torch::outer(positions, inv);  // (T, rot / 2)
  auto emb =
      config_.rotary == rotary_style::half ? torch::cat({freqs, freqs}, -1) : freqs.repeat_interleave(2, -1);
  // Rounded as the layers use them (transformers casts them to the activations' dtype).
  const auto activations = activation_dtype_ ? *activation_dtype_ : embed_tokens_.scalar_type();
  return {emb.cos().to(activations).to(torch::kFloat), emb.sin().to(activations).to(torch::kFloat)};
}

torch::Tensor decoder_impl::head_input(const torch::Tensor& hidden) {
  auto x = hidden;
  if (final_norm_) x = final_norm_->forward(x);
  if (project_out_) x = project_out_->forward(x);
  return x;
}

void decoder_impl::check_lm_head(const char* what) const {
  if (score_weight_.defined())
    throw model_error(model_errc::bad_input,
                      std::string(what) + ": this model is a sequence classifier (num_labels " +
                          std::to_string(config_.num_labels) +
                          ", a score head and no LM head): it has no logits over the vocabulary, only a "
                          "score per row (`cohort-model score`)");
}

torch::Tensor decoder_impl::sequence_scores(const torch::Tensor& hidden, const torch::Tensor& input_ids) {
  if (!score_weight_.defined())
    throw model_error(model_errc::bad_input,
                      "sequence_scores: this model has an LM head, no score head (num_labels 0)");
  const auto last = last_token_index(input_ids, config_.pad_token_id);  // (B)
  const auto rows = torch::arange(hidden.size(0), last.options());
  const auto x = head_input(hidden.index({rows, last}));  // (B, E)
  return torch::linear(x, like(score_weight_, x));        // (B, num_labels)
}

std::pair<torch::Tensor, torch::Tensor> decoder_impl::padded_head() const {
  const std::int64_t V = config_.vocab_size, padded = padded_vocab(V);
  if (padded == V) return {lm_head_weight_, lm_head_bias_};
  const auto options = lm_head_weight_.options();
  auto weight = torch::constant_pad_nd(lm_head_weight_, {0, 0, 0, padded - V});  // (V', E)
  auto bias = torch::cat({lm_head_bias_.defined() ? lm_head_bias_ : torch::zeros({V}, options),
                          torch::full({padded - V}, -std::numeric_limits<double>::infinity(), options)});
  return {weight, bias};
}

torch::Tensor decoder_impl::head(const torch::Tensor& hidden) {
  check_lm_head("head");
  const auto x = head_input(hidden);
  if (!fused_for(path_, x)) return torch::linear(x, like(lm_head_weight_, x), like(lm_head_bias_, x));
  const auto [weight, bias] = padded_head();
  return torch::linear(x, like(weight, x), like(bias, x)).slice(-1, 0, config_.vocab_size);  // (B, T, V) view
}

torch::Tensor decoder_impl::head_loss(const torch::Tensor& hidden, const torch::Tensor& labels,
                                      bool sum) {
  check_lm_head("head_loss");
  if (!fused_for(path_, hidden)) return causal_lm_loss(head(hidden), labels, sum);
  const auto x = head_input(hidden);
  const auto flat = x.reshape({-1, x.size(-1)});                   // (B·T, E)
  const auto targets = shifted_targets(labels).reshape({-1});       // (B·T)
  const auto [weight, bias] = padded_head();
  const std::int64_t rows = loss_chunk_tokens_ > 0 ? loss_chunk_tokens_ : std::max<std::int64_t>(1, flat.size(0));
  auto total = chunked_lm_head_loss(flat, like(weight, x), like(bias, x), targets, rows);
  if (sum) return total;
  return total / targets.ne(-100).sum().to(torch::kFloat);  // no host synchronisation
}

void decoder_impl::set_compute_path(compute_path path) {
  path_ = path;
  for (const auto& m : modules(false)) {
    if (auto* n = m->as<norm_impl>()) n->path = path;
    if (auto* a = m->as<attention_impl>()) a->path = path;
    if (auto* f = m->as<mlp_impl>()) f->path = path;
    if (auto* p = m->as<projection_impl>()) p->path = path;
  }
}

void decoder_impl::set_loss_chunk_tokens(std::int64_t tokens) {
  if (tokens < 0) {
    throw std::invalid_argument("loss chunk: " + std::to_string(tokens) +
                                " positions per chunk; allowed: 0 (one chunk) or more");
  }
  loss_chunk_tokens_ = tokens;
}

torch::Tensor decoder_impl::forward_cached(const torch::Tensor& input_ids, kv_cache& cache) {
  check_lm_head("forward_cached");
  const std::int64_t T = input_ids.size(1), past = cache.length;
  if (embed_positions_.defined() && past + T > config_.max_positions) {
    throw model_error(model_errc::bad_input,
                      "generation: " + std::to_string(past + T) + " positions exceed the model's " +
                          std::to_string(config_.max_positions) + " (max_position_embeddings)");
  }
  cache.keys.resize(layers_.size());
  cache.values.resize(layers_.size());
  auto x = embed(input_ids, past);
  auto ctx = context(T, input_ids.device(), past);
  if (past == 0) add_masks(ctx, {0}, T, input_ids.device(), true);  // every layer masks with a cache
  ctx.cache = &cache;
  for (auto& layer : layers_) x = layer->forward(x, ctx);
  cache.length = past + T;
  return head(x);
}

kv_cache decoder_impl::preallocated_cache(std::int64_t batch, std::int64_t capacity,
                                          const torch::Device& device) const {
  if (capacity < 1 || (embed_positions_.defined() && capacity > config_.max_positions)) {
    throw model_error(
        model_errc::bad_input,
        "generation: a cache of " + std::to_string(capacity) + " positions; allowed: 1 to " +
            (embed_positions_.defined() ? std::to_string(config_.max_positions) + " (max_position_embeddings)"
                                        : std::string("any")));
  }
  const auto dtype = activation_dtype_ ? *activation_dtype_ : embed_tokens_.scalar_type();
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  kv_cache cache;
  cache.capacity = capacity;
  // Zeros: a masked position's weight is 0, and 0 times a never-written NaN would not be.
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    cache.keys.push_back(torch::zeros({batch, config_.num_kv_heads, capacity, config_.head_dim}, options));
    cache.values.push_back(torch::zeros({batch, config_.num_kv_heads, capacity, config_.head_dim}, options));
  }
  cache.key_positions = torch::arange(capacity, options.dtype(torch::kInt64));
  if (config_.rotary != rotary_style::none)
    cache.inverse_frequencies = inverse_frequencies(config_).to(device);
  return cache;
}

torch::Tensor decoder_impl::forward_at(const torch::Tensor& input_ids, const torch::Tensor& positions,
                                       kv_cache& cache) {
  check_lm_head("forward_at");
  attention_context ctx;
  ctx.cache = &cache;
  ctx.positions = positions;
  if (config_.rotary != rotary_style::none)
    std::tie(ctx.cos, ctx.sin) = rotary_tables(positions.to(torch::kFloat), cache.inverse_frequencies);
  std::vector<std::int64_t> windows = config_.sliding_window;
  windows.push_back(0);  // every layer masks with a cache
  add_masks(ctx, windows, positions, cache.key_positions, true);
  auto x = embed_at(input_ids, positions);
  for (auto& layer : layers_) x = layer->forward(x, ctx);
  return head(x);
}

decoder_output decoder_impl::forward(const torch::Tensor& input_ids, const torch::Tensor& labels) {
  check_lm_head("forward");
  residual_stream stream{embed(input_ids), {}};
  const auto ctx = context(input_ids.size(1), input_ids.device());
  for (auto& layer : layers_) stream = layer->forward(stream, ctx);
  decoder_output out;
  auto x = head_input(stream.sum());
  const bool fused = fused_for(path_, x);
  torch::Tensor padded;  // (B, T, V') on the fused path
  if (fused) {
    const auto [weight, bias] = padded_head();
    padded = torch::linear(x, like(weight, x), like(bias, x));
    out.logits = padded.slice(-1, 0, config_.vocab_size);
  } else {
    out.logits = torch::linear(x, like(lm_head_weight_, x), like(lm_head_bias_, x));
  }
  if (labels.defined()) {
    check_ids(labels, "labels", true);
    if (labels.sizes() != input_ids.sizes()) {
      throw model_error(model_errc::bad_input, "labels must have the shape of input_ids");
    }
    if (fused) {  // the padded logits as they are (no copy of a (B, T - 1, V) slice)
      out.loss = at::cross_entropy_loss(padded.to(torch::kFloat).reshape({-1, padded.size(-1)}),
                                        shifted_targets(labels).reshape({-1}), {},
                                        at::Reduction::Mean, -100);
    } else {
      out.loss = causal_lm_loss(out.logits, labels);
    }
  }
  return out;
}

torch::Tensor last_token_index(const torch::Tensor& input_ids, std::optional<std::int64_t> pad_token_id) {
  const auto T = input_ids.size(-1);
  if (!pad_token_id) return torch::full({input_ids.size(0)}, T - 1, input_ids.options().dtype(torch::kInt64));
  const auto not_pad = input_ids.ne(*pad_token_id).to(torch::kInt32);
  const auto positions = torch::arange(T, input_ids.options().dtype(torch::kInt32));
  return (positions * not_pad).argmax(-1).to(torch::kInt64);
}

torch::Tensor pairwise_reward_loss(const torch::Tensor& chosen, const torch::Tensor& rejected) {
  return torch::softplus(rejected.to(torch::kFloat) - chosen.to(torch::kFloat)).sum();
}

torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels, bool sum) {
  const std::int64_t V = logits.size(-1), T = logits.size(1);
  auto shift_logits = logits.slice(1, 0, T - 1).to(torch::kFloat).reshape({-1, V});
  auto shift_labels = labels.slice(1, 1, T).reshape({-1});
  return at::cross_entropy_loss(shift_logits, shift_labels, {},
                                sum ? at::Reduction::Sum : at::Reduction::Mean, -100);
}

decoder make_placeholder_decoder(const model_config& config) {
  struct flag {
    flag() { building_placeholders = true; }
    ~flag() { building_placeholders = false; }
  } placeholders;
  return decoder(config, torch::TensorOptions().dtype(torch::kFloat), false);
}

}  // namespace cohort::core::model

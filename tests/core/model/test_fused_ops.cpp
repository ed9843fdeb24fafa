// The decoder's own CUDA kernels (core/model/fused_ops.hpp) against the ATen formulas they
// replace, forward and backward, fp32, bf16 and fp16; and the optimizer's AdamW and sum of squares
// against adamw_step and ATen's fp64 sum, and the clipping coefficient on the device. The GPU cases are hidden ([.gpu]: run
// `test_core_model "[gpu]"` on a machine with a CUDA device, in the CUDA build).
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/model/fused_ops.hpp"
#include "tests/core/model/relative_gap.hpp"

#include "tests/support/catch_torch.hpp"

using namespace cohort::core::model;

namespace {

using cohort::test::relative_gap;

// t's values in fp32 as a new leaf that records its gradient: the fp32 reference's input.
torch::Tensor fp32_leaf(const torch::Tensor& t) { return t.detach().to(torch::kFloat).requires_grad_(true); }

// The tolerance of a 16-bit or fp32 result against the fp32 reference, relative to its largest value.
double tolerance_for(torch::ScalarType type) {
  return type == torch::kFloat ? 1e-4 : (type == torch::kHalf ? 3e-3 : 2e-2);
}

// y and the gradients of x, w and b within `tol` of the fp32 reference's (ref, and its leaves'
// gradients after ref.backward).
void check_against_fp32(const torch::Tensor& y, const std::vector<torch::Tensor>& inputs,
                        const torch::Tensor& ref, const std::vector<torch::Tensor>& leaves, double tol) {
  CHECK(relative_gap(y.detach(), ref.detach()) <= tol);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    INFO("input " << i);
    CHECK(relative_gap(inputs[i].grad(), leaves[i].grad()) <= tol);
  }
}

// transformers' apply_rotary_pos_emb on (B, T, heads, D), in fp32.
torch::Tensor rotary_reference(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const std::int64_t D = x.size(-1), T = x.size(1);
  auto rotated = torch::cat({-x.slice(-1, D / 2, D), x.slice(-1, 0, D / 2)}, -1);
  return x * cos.view({1, T, 1, D}) + rotated * sin.view({1, T, 1, D});
}

// Llama's rotary tables at positions 0..T-1 (base 10000), each value rounded through `type` as the
// decoder's attention_context rounds them: {cos, sin}, (T, D) fp32 on the GPU.
std::pair<torch::Tensor, torch::Tensor> llama_tables(std::int64_t T, std::int64_t D, torch::ScalarType type) {
  auto pos = torch::arange(T, torch::kFloat).unsqueeze(1);
  auto inv = 1.0 / torch::pow(10000.0, torch::arange(0, D, 2, torch::kFloat) / D);
  auto freqs = torch::cat({pos * inv, pos * inv}, -1).to(torch::kCUDA);  // (T, D)
  return {freqs.cos().to(type).to(torch::kFloat), freqs.sin().to(type).to(torch::kFloat)};
}

struct rotary_case {
  std::int64_t B, T, heads, kv_heads, D;
};

// Forward and backward of fused_rotary_qkv against the reference on q, k and v of one fused
// projection; `tol` relative to the largest value.
void check_rotary(torch::ScalarType type, const rotary_case& c, double tol) {
  INFO("dtype " << c10::toString(type) << " B " << c.B << " T " << c.T << " D " << c.D);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(type);
  const std::int64_t q_cols = c.heads * c.D, k_cols = c.kv_heads * c.D, qk = q_cols + k_cols,
                     cols = qk + k_cols;
  auto qkv = torch::randn({c.B, c.T, cols}, opts).requires_grad_(true);
  const auto [cos, sin] = llama_tables(c.T, c.D, type);  // rounded through the activations' dtype
  const auto outs = fused_rotary_qkv(qkv, cos, sin, q_cols, k_cols, c.D);
  REQUIRE(outs.size() == 3U);
  auto out = torch::cat({outs[0], outs[1], outs[2]}, -1);
  auto grad_out = torch::randn_like(out);
  const auto grads = grad_out.split_with_sizes({q_cols, k_cols, k_cols}, -1);
  torch::autograd::backward({outs[0], outs[1], outs[2]}, {grads[0], grads[1], grads[2]});

  // The reference in fp32 from the same (rounded) inputs.
  auto x = qkv.detach().to(torch::kFloat).requires_grad_(true);
  auto parts = x.split_with_sizes({q_cols, k_cols, k_cols}, -1);
  auto q = rotary_reference(parts[0].reshape({c.B, c.T, c.heads, c.D}), cos, sin);
  auto k = rotary_reference(parts[1].reshape({c.B, c.T, c.kv_heads, c.D}), cos, sin);
  auto ref = torch::cat({q.flatten(2), k.flatten(2), parts[2]}, -1);
  ref.backward(grad_out.to(torch::kFloat));

  for (int i = 0; i < 3; ++i) CHECK(outs[i].is_contiguous());
  CHECK(outs[0].sizes() == torch::IntArrayRef({c.B, c.T, q_cols}));
  CHECK(outs[2].sizes() == torch::IntArrayRef({c.B, c.T, k_cols}));
  CHECK(relative_gap(out.detach(), ref.detach()) <= tol);
  CHECK(relative_gap(qkv.grad(), x.grad()) <= tol);
  // v passes through untouched, both ways.
  CHECK(torch::equal(outs[2].detach(), qkv.detach().slice(-1, qk)));
  CHECK(torch::equal(qkv.grad().slice(-1, qk), grad_out.slice(-1, qk)));
  // An output that gets no gradient (v here) counts as zero in qkv's.
  auto again = qkv.detach().clone().requires_grad_(true);
  const auto outs2 = fused_rotary_qkv(again, cos, sin, q_cols, k_cols, c.D);
  torch::autograd::backward({outs2[0], outs2[1]}, {grads[0], grads[1]});
  CHECK(torch::equal(again.grad().slice(-1, 0, qk), qkv.grad().slice(-1, 0, qk)));
  CHECK(again.grad().slice(-1, qk).abs().max().item<double>() == 0.0);
  // The backward on its own takes the undefined one as zero too.
  const auto alone =
      fused_rotary_qkv_backward({grads[0], grads[1], torch::Tensor()}, cos, sin, q_cols, k_cols, k_cols, c.D);
  CHECK(torch::equal(alone, again.grad()));
  CHECK_THROWS_WITH(fused_rotary_qkv_backward({torch::Tensor(), torch::Tensor(), torch::Tensor()}, cos, sin,
                                              q_cols, k_cols, k_cols, c.D),
                    Catch::Contains("fused_rotary_qkv_backward") && Catch::Contains("at least one defined"));
}

void check_swiglu(torch::ScalarType type, std::int64_t rows, std::int64_t inner, double tol) {
  INFO("dtype " << c10::toString(type) << " rows " << rows << " inner " << inner);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(type);
  auto gate_up = (2 * torch::randn({rows, 2 * inner}, opts)).requires_grad_(true);
  auto out = fused_swiglu(gate_up);
  auto grad_out = torch::randn_like(out);
  out.backward(grad_out);

  auto x = gate_up.detach().to(torch::kFloat).requires_grad_(true);
  auto parts = x.chunk(2, -1);
  auto ref = torch::silu(parts[0]) * parts[1];
  ref.backward(grad_out.to(torch::kFloat));
  CHECK(out.sizes() == torch::IntArrayRef({rows, inner}));
  CHECK(relative_gap(out.detach(), ref.detach()) <= tol);
  CHECK(relative_gap(gate_up.grad(), x.grad()) <= tol);
}

struct norm_case {
  bool layer;  // LayerNorm, else RMSNorm
  std::int64_t rows, cols;
  bool residual, affine;
};

// fused_norm forward and backward against ATen's norm in fp32 on the same rounded h = x + residual,
// with a gradient arriving at h from another use (gh) as the next residual add sends it; `tol`
// relative to the largest value.
void check_norm(torch::ScalarType type, const norm_case& c, double tol) {
  INFO("dtype " << c10::toString(type) << (c.layer ? " LayerNorm" : " RMSNorm") << " rows " << c.rows
                << " cols " << c.cols << " residual " << c.residual << " affine " << c.affine);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(type);
  const auto leaf = [](const torch::Tensor& t) { return t.detach().requires_grad_(true); };
  auto x = leaf(torch::randn({c.rows, c.cols}, opts) * 2 + (c.layer ? 0.5 : 0.0));  // LayerNorm: a mean
  auto r = c.residual ? leaf(torch::randn({c.rows, c.cols}, opts)) : torch::Tensor();
  auto w = c.affine ? leaf(1 + 0.3 * torch::randn({c.cols}, opts)) : torch::Tensor();
  auto b = c.affine && c.layer ? leaf(0.2 * torch::randn({c.cols}, opts)) : torch::Tensor();
  const auto out = fused_norm(x, r, w, b, c.layer, 1e-5);
  REQUIRE(out.size() == (c.residual ? 2U : 1U));
  const auto gy = torch::randn_like(out[0]), gh = torch::randn_like(x);
  auto loss = (out[0].to(torch::kFloat) * gy.to(torch::kFloat)).sum();
  if (c.residual) loss = loss + (out[1].to(torch::kFloat) * gh.to(torch::kFloat)).sum();
  loss.backward();

  const auto h = c.residual ? (x.detach() + r.detach()) : x.detach();  // rounded in `type` as the kernel does
  if (c.residual) CHECK(torch::equal(out[1], h));
  auto h32 = leaf(h.to(torch::kFloat));
  auto w32 = c.affine ? leaf(w.to(torch::kFloat)) : torch::Tensor();
  auto b32 = b.defined() ? leaf(b.to(torch::kFloat)) : torch::Tensor();
  torch::Tensor ref;
  if (c.layer) {
    ref = torch::layer_norm(h32, {c.cols}, w32, b32, 1e-5);
  } else {
    ref = h32 * torch::rsqrt(h32.pow(2).mean(-1, true) + 1e-5);
    if (c.affine) ref = ref * w32;
  }
  auto ref_loss = (ref * gy.to(torch::kFloat)).sum();
  if (c.residual) ref_loss = ref_loss + (h32 * gh.to(torch::kFloat)).sum();
  ref_loss.backward();
  CHECK(out[0].sizes() == x.sizes());
  CHECK(relative_gap(out[0].detach(), ref.detach()) <= tol);
  CHECK(relative_gap(x.grad(), h32.grad()) <= tol);
  if (c.residual) CHECK(torch::equal(r.grad(), x.grad()));  // both feed h through a sum
  if (c.affine) CHECK(relative_gap(w.grad(), w32.grad()) <= tol);
  if (b.defined()) CHECK(relative_gap(b.grad(), b32.grad()) <= tol);
}

}  // namespace

TEST_CASE("the clipping coefficient as a tensor is the host's, bit for bit", "[core][model]") {
  for (const double squares : {0.0, 1e-12, 0.25, 1.0, 3.7, 1e6, 1e300}) {
    INFO("squares " << squares);
    const auto coef = clip_coefficient(torch::scalar_tensor(squares, torch::kDouble), 1.0);
    CHECK(coef.scalar_type() == torch::kDouble);
    CHECK(coef.dim() == 0);
    CHECK(coef.item<double>() == clip_coefficient(std::sqrt(squares), 1.0));
  }
  // A NaN norm gives 1, as std::min(1.0, NaN) does on the host.
  const auto nan = clip_coefficient(torch::scalar_tensor(std::nan(""), torch::kDouble), 1.0);
  CHECK(nan.item<double>() == clip_coefficient(std::nan(""), 1.0));
}

TEST_CASE("the fused kernels are never offered for CPU tensors", "[core][model]") {
  CHECK_FALSE(fused_kernels_available(torch::zeros({2, 4})));
  CHECK_FALSE(fused_kernels_available(torch::zeros({2, 4}, torch::kBFloat16)));
}

TEST_CASE("the rotary kernel gives transformers' rotary on q and k and copies v, both ways",
          "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  REQUIRE(fused_kernels_available(torch::zeros({1}, torch::kCUDA)));
  torch::manual_seed(3);
  // The last: rows enough for hundreds of blocks (600 rows of 8 q and 2 k heads of 128).
  for (const rotary_case& c : {rotary_case{2, 7, 4, 2, 8}, rotary_case{1, 33, 8, 8, 64},
                               rotary_case{3, 5, 6, 1, 128}, rotary_case{2, 300, 8, 2, 128}}) {
    check_rotary(torch::kFloat, c, 1e-6);
    check_rotary(torch::kBFloat16, c, 1e-2);
    check_rotary(torch::kHalf, c, 2e-3);
  }
}

TEST_CASE("the SwiGLU kernel gives silu(gate) * up and its gradients, vectorised or not",
          "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(4);
  for (const std::int64_t inner : {24, 27, 64, 5632}) {  // 27: no 16-byte groups
    check_swiglu(torch::kFloat, 9, inner, 1e-5);
    check_swiglu(torch::kBFloat16, 9, inner, 1e-2);
    check_swiglu(torch::kHalf, 9, inner, 2e-3);
  }
  // A (B, T, 2I) input keeps its leading dimensions.
  auto y = fused_swiglu(torch::randn({2, 3, 16}, torch::kCUDA));
  CHECK(y.sizes() == torch::IntArrayRef({2, 3, 8}));
}

TEST_CASE(
    "on an H100 or H200 the Hopper GEMM gives the gate/up projection and the SwiGLU kernel's h, "
    "and SwiGLU's backward through the down projection, over more tiles than multiprocessors, from "
    "weights with rows apart, the same bits every call",
    "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(6);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  // 40 x 8 tiles of 128 x (128 gate + 128 up) columns; k of 8 steps, more than the 3 stages.
  const std::int64_t B = 2, T = 2560, in = 512, inner = 1024;
  const auto x = torch::randn({B, T, in}, bf16);
  const auto rows = torch::randn({2 * inner, in + 64}, bf16);  // each weight's rows in + 64 apart
  const auto gate = rows.narrow(0, 0, inner).narrow(1, 0, in),
             up = rows.narrow(0, inner, inner).narrow(1, 0, in);
  if (!hopper_device(x)) {  // another GPU: the op is not offered
    CHECK_FALSE(fused_linear_swiglu_fits(x, gate, up));
    return;
  }
  REQUIRE(fused_linear_swiglu_fits(x, gate, up));
  const auto [gate_up, h] = fused_linear_swiglu(x, gate, up);
  CHECK(gate_up.sizes() == torch::IntArrayRef({B, T, 2 * inner}));
  CHECK(h.sizes() == torch::IntArrayRef({B, T, inner}));
  const auto expected = at::matmul(x.to(torch::kFloat), torch::cat({gate, up}, 0).to(torch::kFloat).t());
  CHECK(relative_gap(gate_up, expected) <= 1e-2);
  CHECK(torch::equal(h, fused_swiglu(gate_up)));  // one formula: the SwiGLU kernel's bits
  const auto [again, h_again] = fused_linear_swiglu(x, gate, up);
  CHECK(torch::equal(again, gate_up));
  CHECK(torch::equal(h_again, h));
  // SwiGLU's backward inside the down projection's input-gradient GEMM (down: hidden x inner):
  // what dh = grad_y down and the SwiGLU backward kernel give.
  const auto down = torch::randn({in, inner}, bf16), grad_y = torch::randn({B, T, in}, bf16);
  REQUIRE(fused_swiglu_input_grad_fits(grad_y, down));
  const auto grad_gate_up = fused_swiglu_input_grad(grad_y, down, gate_up);
  CHECK(grad_gate_up.sizes() == gate_up.sizes());
  CHECK(relative_gap(grad_gate_up,
                     fused_swiglu_backward(at::matmul(grad_y, down), gate_up).to(torch::kFloat)) <= 2e-2);
  CHECK(torch::equal(fused_swiglu_input_grad(grad_y, down, gate_up), grad_gate_up));
  CHECK_FALSE(fused_swiglu_input_grad_fits(grad_y, down.narrow(1, 0, 1000)));  // inner not 256s
  // What is not whole tiles, or not bf16, is refused, and the error names the op.
  CHECK_FALSE(fused_linear_swiglu_fits(x.narrow(1, 0, 100).contiguous(), gate, up));
  CHECK_FALSE(fused_linear_swiglu_fits(x, gate.narrow(0, 0, 1000), up.narrow(0, 0, 1000)));
  CHECK_FALSE(fused_linear_swiglu_fits(x.to(torch::kFloat), gate, up));
  CHECK_THROWS_WITH(fused_linear_swiglu(x.narrow(1, 0, 100).contiguous(), gate, up),
                    Catch::Contains("fused_linear_swiglu") && Catch::Contains("multiple of 128"));
}

TEST_CASE(
    "on an H100 or H200 the Hopper GEMM with rotary gives q and k as the rotary kernel turns its own "
    "product and v as it is, over more tiles than multiprocessors, heads of 64 and of 128, the same "
    "bits every call",
    "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(9);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  struct shape {
    std::int64_t B, T, in, heads, kv_heads, D;
  };
  // 40 x 4 tiles (k of 8 steps, more than the 3 stages); then tiles that hold k's head and v's.
  for (const shape& c : {shape{2, 2560, 512, 8, 4, 64}, shape{3, 256, 256, 6, 1, 128}}) {
    INFO("heads of " << c.D);
    const std::int64_t q_cols = c.heads * c.D, kv_cols = c.kv_heads * c.D;
    const auto x = torch::randn({c.B, c.T, c.in}, bf16);
    const auto rows = torch::randn({q_cols + 2 * kv_cols, c.in + 64}, bf16);  // rows in + 64 apart
    const auto weight = rows.narrow(1, 0, c.in);
    const auto [cos, sin] = llama_tables(c.T, c.D, torch::kBFloat16);
    if (!hopper_device(x)) {  // another GPU: the op is not offered
      CHECK_FALSE(fused_linear_rotary_qkv_fits(x, weight, q_cols, kv_cols, c.D));
      return;
    }
    REQUIRE(fused_linear_rotary_qkv_fits(x, weight, q_cols, kv_cols, c.D));
    const auto parts = fused_linear_rotary_qkv(x, weight, cos, sin, q_cols, kv_cols, c.D);
    REQUIRE(parts.size() == 3);
    CHECK(parts[0].sizes() == torch::IntArrayRef({c.B, c.T, q_cols}));
    CHECK(parts[1].sizes() == torch::IntArrayRef({c.B, c.T, kv_cols}));
    CHECK(parts[2].sizes() == torch::IntArrayRef({c.B, c.T, kv_cols}));
    const auto product = own_linear(x, weight);
    CHECK(relative_gap(product, at::matmul(x.to(torch::kFloat), weight.to(torch::kFloat).t())) <= 1e-2);
    const auto separate = fused_rotary_qkv(product, cos, sin, q_cols, kv_cols, c.D);
    for (int i = 0; i < 3; ++i) {
      INFO("part " << i);
      CHECK(torch::equal(parts[i], separate[i]));  // one formula: the rotary kernel's bits
    }
    const auto again = fused_linear_rotary_qkv(x, weight, cos, sin, q_cols, kv_cols, c.D);
    for (int i = 0; i < 3; ++i) CHECK(torch::equal(again[i], parts[i]));
  }
  // What is not whole tiles, heads it cannot pair in a tile, or not bf16, is refused, and the
  // error names the op.
  const auto x = torch::randn({2, 256, 512}, bf16);
  const auto w = torch::randn({1024, 512}, bf16);
  CHECK(fused_linear_rotary_qkv_fits(x, w, 512, 256, 64));
  CHECK_FALSE(fused_linear_rotary_qkv_fits(x.narrow(1, 0, 100).contiguous(), w, 512, 256, 64));
  CHECK_FALSE(fused_linear_rotary_qkv_fits(x, w.narrow(0, 0, 1000), 512, 256, 64));  // not 256s
  CHECK_FALSE(fused_linear_rotary_qkv_fits(x, w, 480, 288, 96));                     // 96 divides no tile
  CHECK_FALSE(fused_linear_rotary_qkv_fits(x.to(torch::kFloat), w, 512, 256, 64));
  const auto [cos, sin] = llama_tables(100, 64, torch::kBFloat16);
  CHECK_THROWS_WITH(fused_linear_rotary_qkv(x.narrow(1, 0, 100).contiguous(), w, cos, sin, 512, 256, 64),
                    Catch::Contains("fused_linear_rotary_qkv") && Catch::Contains("multiple of 128"));
}

TEST_CASE("the cross-entropy kernel gives ATen's summed loss and its gradient over the logits, "
          "ignoring -100 rows and -inf padding columns", "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(5);
  // Rows kept in a block's shared memory (on an H200 up to 116,160 16-bit logits, 58,080 fp32):
  // 64 and 50304 in 16-byte groups; 37 and GPT-2's 50257, rows that start anywhere, in groups
  // between a head and a tail of single elements. Rows read twice: 150016 (in groups) and 150001
  // (one element at a time) in every dtype.
  for (const std::int64_t V : {64, 37, 50304, 50257, 150016, 150001}) {
    for (const auto type : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      INFO("V " << V << " dtype " << c10::toString(type));
      const std::int64_t n = 9, pad = V > 40 ? 5 : 0;  // the last `pad` columns are -inf
      auto logits = (torch::randn({n, V}, torch::kCUDA) * 3).to(type);
      if (pad > 0) logits.slice(1, V - pad, V).fill_(-std::numeric_limits<double>::infinity());
      auto targets = torch::randint(0, V - pad, {n}, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
      targets[2] = -100;
      targets[7] = -100;
      // ATen's way, in fp32 from the same rounded logits.
      auto x = logits.to(torch::kFloat).requires_grad_(true);
      auto ref = at::cross_entropy_loss(x, targets, {}, at::Reduction::Sum, -100);
      ref.backward();
      const double tol = type == torch::kFloat ? 1e-5 : (type == torch::kHalf ? 1e-3 : 1e-2);

      auto no_grad = logits.clone();
      const auto loss_only = fused_cross_entropy(no_grad, targets, false);
      CHECK(torch::equal(no_grad, logits));  // untouched without want_grad
      auto work = logits.clone();
      const auto loss = fused_cross_entropy(work, targets, true);
      CHECK(loss.scalar_type() == torch::kFloat);
      CHECK(std::abs(loss.item<double>() - ref.item<double>()) <= 1e-5 * std::abs(ref.item<double>()));
      CHECK(loss_only.item<double>() == loss.item<double>());
      const auto gap = ((work.to(torch::kFloat) - x.grad()).abs().max()).item<double>();
      CHECK(gap <= tol);
      CHECK(work.slice(0, 2, 3).abs().max().item<double>() == 0.0);  // ignored rows: zero
      if (pad > 0) CHECK(work.slice(1, V - pad, V).abs().max().item<double>() == 0.0);
      // Each kept row's gradient sums to zero (probabilities sum to one, less the target's one).
      CHECK(work.to(torch::kFloat).sum(1).abs().max().item<double>() <= (type == torch::kFloat ? 1e-5 : 0.05));
    }
  }
  // A target past the row's end is not a silent number.
  auto logits = torch::randn({2, 16}, torch::kCUDA);
  auto targets = torch::tensor({3, 16}, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
  CHECK(std::isnan(fused_cross_entropy(logits, targets, false).item<double>()));
}

TEST_CASE("the AdamW kernel gives adamw_step on the scaled gradient and writes the rounded copy, "
          "vectorised or not", "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(6);
  adamw_options o;
  o.lr = 3e-3;
  o.weight_decay = 0.1;
  // 4099 elements read one at a time; 4096 in groups of 4; an offset view breaks the alignment.
  for (const std::int64_t n : {4099, 4096}) {
    for (const std::int64_t offset : {0, 1}) {
      for (const auto grad_type : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
        for (const auto copy_type : {torch::kBFloat16, torch::kFloat}) {
          INFO("n " << n << " offset " << offset << " grad " << c10::toString(grad_type) << " copy "
                    << c10::toString(copy_type));
          const auto cuda = torch::TensorOptions(torch::kCUDA);
          auto kernel_master = torch::randn({n + offset}, cuda).narrow(0, offset, n);
          auto reference_master = kernel_master.clone();
          adamw_state kernel_state, reference_state;
          auto copy = torch::empty({n + offset}, cuda.dtype(copy_type)).narrow(0, offset, n);
          const double scale = 0.25;
          for (int step = 0; step < 3; ++step) {
            auto grad = torch::randn({n + offset}, cuda).to(grad_type).narrow(0, offset, n);
            fused_adamw_step(kernel_master, grad, kernel_state, o, scale, copy);
            adamw_step(reference_master, grad.to(torch::kFloat) * scale, reference_state, o);
          }
          CHECK(kernel_state.step == 3);
          CHECK(relative_gap(kernel_master, reference_master) <= 1e-6);
          CHECK(relative_gap(kernel_state.exp_avg, reference_state.exp_avg) <= 1e-6);
          CHECK(relative_gap(kernel_state.exp_avg_sq, reference_state.exp_avg_sq) <= 1e-6);
          CHECK(torch::equal(copy, kernel_master.to(copy_type)));  // rounded once from the master
        }
      }
    }
  }
  // Without a copy only the master and moments change; mismatched sizes are refused.
  auto master = torch::randn({64}, torch::kCUDA);
  adamw_state state;
  fused_adamw_step(master, torch::randn({64}, torch::kCUDA), state, o, 1.0, torch::Tensor());
  CHECK(state.step == 1);
  CHECK_THROWS_AS(fused_adamw_step(master, torch::randn({63}, torch::kCUDA), state, o, 1.0, torch::Tensor()),
                  std::invalid_argument);
}

TEST_CASE(
    "the AdamW kernel updates many tensors of mixed sizes, dtypes and step counts in one call as "
    "it updates each alone",
    "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(16);
  adamw_options o;
  o.lr = 2e-3;
  o.weight_decay = 0.05;
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  // Sizes past one block's stretch and odd ones; an offset view (unaligned); bf16 and fp32
  // gradients (two launches); with and without a copy; one target a step ahead of the others.
  struct shape {
    std::int64_t n, offset;
    torch::ScalarType grad;
    c10::optional<torch::ScalarType> copy;  // none: no copy
  };
  const std::vector<shape> shapes{
      {100000, 0, torch::kBFloat16, torch::kBFloat16}, {16385, 1, torch::kBFloat16, torch::kBFloat16},
      {0, 0, torch::kBFloat16, torch::kBFloat16},      {7, 0, torch::kFloat, c10::nullopt},
      {50000, 0, torch::kFloat, torch::kBFloat16},     {4096, 0, torch::kBFloat16, c10::nullopt}};
  std::vector<torch::Tensor> masters, alone_masters, grads, copies, alone_copies;
  std::vector<adamw_state> states(shapes.size()), alone_states(shapes.size());
  for (const auto& s : shapes) {
    masters.push_back(torch::randn({s.n + s.offset}, cuda).narrow(0, s.offset, s.n));
    alone_masters.push_back(masters.back().clone());
    const auto copy = [&] {
      return !s.copy ? torch::Tensor()
                     : torch::empty({s.n + s.offset}, cuda.dtype(*s.copy)).narrow(0, s.offset, s.n);
    };
    copies.push_back(copy());
    alone_copies.push_back(copy());
  }
  fused_adamw_step(masters[1], torch::randn({shapes[1].n}, cuda), states[1], o, 1.0, torch::Tensor());
  fused_adamw_step(alone_masters[1], torch::randn({shapes[1].n}, cuda), alone_states[1], o, 1.0,
                   torch::Tensor());
  alone_masters[1].copy_(masters[1]);
  alone_states[1].exp_avg.copy_(states[1].exp_avg);
  alone_states[1].exp_avg_sq.copy_(states[1].exp_avg_sq);
  const auto coef = torch::full({}, 0.5, cuda.dtype(torch::kDouble));
  for (int step = 0; step < 2; ++step) {
    std::vector<fused_adamw_target> targets;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const auto grad = torch::randn({shapes[i].n}, cuda).to(shapes[i].grad);
      targets.push_back({masters[i], grad, &states[i], copies[i]});
      fused_adamw_step(alone_masters[i], grad, alone_states[i], o, 0.75, alone_copies[i], coef);
    }
    fused_adamw_step(targets, o, 0.75, coef);
  }
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    INFO("target " << i);
    CHECK(states[i].step == alone_states[i].step);
    CHECK(torch::equal(masters[i], alone_masters[i]));
    CHECK(torch::equal(states[i].exp_avg, alone_states[i].exp_avg));
    CHECK(torch::equal(states[i].exp_avg_sq, alone_states[i].exp_avg_sq));
    if (copies[i].defined()) CHECK(torch::equal(copies[i], masters[i].to(copies[i].scalar_type())));
  }
  CHECK(states[1].step == 3);
  // A bad target anywhere in the list is refused before anything is updated.
  const auto before = masters[0].clone();
  std::vector<fused_adamw_target> bad{
      {masters[0], torch::randn({shapes[0].n}, cuda), &states[0], copies[0]},
      {masters[3], torch::randn({shapes[3].n + 1}, cuda), &states[3], torch::Tensor()}};
  CHECK_THROWS_AS(fused_adamw_step(bad, o, 1.0), std::invalid_argument);
  CHECK(states[0].step == 2);
  CHECK(torch::equal(masters[0], before));
}

TEST_CASE("the sum-of-squares kernel gives the fp64 sum of squares, the same value on every run",
          "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(7);
  // Past square_sum_partials blocks' worth (striding), one group, odd sizes, empty.
  for (const std::int64_t n : {std::int64_t{3} << 20, std::int64_t{4099}, std::int64_t{8}, std::int64_t{1}, std::int64_t{0}}) {
    for (const auto type : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      INFO("n " << n << " dtype " << c10::toString(type));
      auto x = torch::randn({n}, torch::kCUDA).to(type);
      const auto sum = fused_square_sum(x);
      CHECK(sum.scalar_type() == torch::kDouble);
      CHECK(sum.dim() == 0);
      const double reference = x.to(torch::kDouble).pow(2).sum().item<double>();
      CHECK(std::abs(sum.item<double>() - reference) <= 1e-10 * std::max(1.0, reference));
      CHECK(fused_square_sum(x).item<double>() == sum.item<double>());
    }
  }
  // Several tensors of mixed dtypes and sizes (empty, odd, past the partials' count) in one sum.
  std::vector<torch::Tensor> xs{torch::randn({4099}, torch::kCUDA).to(torch::kBFloat16), torch::zeros({0}, torch::kCUDA),
                                torch::randn({std::int64_t{3} << 20}, torch::kCUDA), torch::randn({7}, torch::kCUDA).to(torch::kHalf)};
  double reference = 0;
  for (const auto& x : xs) reference += x.to(torch::kDouble).pow(2).sum().item<double>();
  const double together = fused_square_sum(xs).item<double>();
  CHECK(std::abs(together - reference) <= 1e-10 * reference);
  CHECK(fused_square_sum(xs).item<double>() == together);
}

TEST_CASE("the widening kernel writes each tensor's fp32 values one after another, vectorised or not",
          "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(11);
  for (const auto type : {torch::kBFloat16, torch::kHalf}) {
    INFO("dtype " << c10::toString(type));
    // 16-byte groups (4096; past one block's stretch: 3 << 16), odd sizes that put the next one
    // off a 16-byte boundary (7, 1001), empty, and a view that starts off one (the 8 after 3).
    const auto storage = torch::randn({11}, torch::kCUDA).to(type);
    const std::vector<torch::Tensor> xs{torch::randn({4096}, torch::kCUDA).to(type),
                                        torch::randn({7}, torch::kCUDA).to(type),
                                        torch::randn({std::int64_t{3} << 16}, torch::kCUDA).to(type),
                                        torch::zeros({0}, torch::kCUDA).to(type),
                                        storage.narrow(0, 3, 8),
                                        torch::randn({1001}, torch::kCUDA).to(type)};
    std::int64_t total = 0;
    for (const auto& x : xs) total += x.numel();
    auto out = torch::full({total + 5}, -1.0f, torch::kCUDA);
    fused_widen_into(xs, out);
    std::vector<torch::Tensor> wide;
    for (const auto& x : xs) wide.push_back(x.to(torch::kFloat));
    CHECK(torch::equal(out.narrow(0, 0, total), torch::cat(wide)));
    CHECK(torch::equal(out.narrow(0, total, 5),
                       torch::full({5}, -1.0f, torch::kCUDA)));  // past them: untouched
  }
  auto small = torch::zeros({4}, torch::kCUDA);
  CHECK_THROWS_WITH(fused_widen_into({torch::zeros({8}, torch::kCUDA).to(torch::kBFloat16)}, small),
                    Catch::Contains("smaller"));
  CHECK_THROWS_WITH(fused_widen_into({torch::zeros({4}, torch::kCUDA)}, small),
                    Catch::Contains("bf16 or fp16"));
}

TEST_CASE("the norm kernels give ATen's RMSNorm and LayerNorm after the residual add, and their "
          "gradients, vectorised or not", "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(8);
  // 768 and 2048: 16-byte groups, 300 rows over several weight-gradient chunks; 37: one element at
  // a time.
  using shape = std::pair<std::int64_t, std::int64_t>;
  // 16384 and 2500 (one element at a time): rows longer than a block's threads, held two or
  // four groups a thread. 4000 x 768 and 2100 x 2048: more rows than the one-pass backward's
  // blocks hold at once (several rows a slot).
  for (const auto& [rows, cols] :
       std::vector<shape>{{9, 768}, {300, 2048}, {5, 37}, {3, 16384}, {4, 2500}, {4000, 768}, {2100, 2048}}) {
    for (const bool layer : {false, true}) {
      for (const bool residual : {false, true}) {
        for (const bool affine : {true, false}) {
          const norm_case c{layer, rows, cols, residual, affine};
          check_norm(torch::kFloat, c, 1e-4);
          check_norm(torch::kBFloat16, c, 2e-2);
          check_norm(torch::kHalf, c, 3e-3);
        }
      }
    }
  }
  // The weights' gradients are the same on every run; (B, T, C) keeps its shape.
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto x = torch::randn({2, 300, 768}, opts), residual = torch::randn_like(x);
  auto w = torch::ones({768}, opts).requires_grad_(true);
  auto b = torch::zeros({768}, opts).requires_grad_(true);
  const auto gy = torch::randn({2, 300, 768}, opts);
  std::vector<torch::Tensor> grads;
  for (int run = 0; run < 2; ++run) {
    const auto y = fused_norm(x, residual, w, b, true, 1e-5)[0];
    CHECK(y.sizes() == x.sizes());
    y.backward(gy);
    grads.push_back(w.grad().clone());
    w.mutable_grad() = torch::Tensor();
  }
  CHECK(torch::equal(grads[0], grads[1]));
  CHECK_THROWS_AS(fused_norm(x, torch::Tensor(), w, b, false, 1e-5), std::invalid_argument);  // RMSNorm, bias
  // Rows past what a block holds are left to ATen's norms.
  CHECK(fused_norm_available(torch::zeros({2, 4096}, opts)));
  CHECK(fused_norm_available(torch::zeros({2, 32768}, opts)));
  CHECK_FALSE(fused_norm_available(torch::zeros({2, 32776}, opts)));
  CHECK_FALSE(fused_norm_available(torch::zeros({2, 4097}, opts)));  // not 16-byte rows: 4096 at most
  CHECK_FALSE(fused_norm_available(torch::zeros({2, 64})));           // CPU
}

TEST_CASE("the biased matmul gives x @ W + b and its gradients, the bias's summed by cohort's kernel",
          "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(10);
  // 2304 columns: 16-byte groups over several chunks of 1100 rows; 37: one element at a time.
  for (const auto& [rows, in, out] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
           {1100, 64, 2304}, {7, 16, 37}}) {
    for (const auto type : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      INFO("dtype " << c10::toString(type) << " rows " << rows << " in " << in << " out " << out);
      const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(type);
      auto x = torch::randn({1, rows, in}, opts).requires_grad_(true);
      auto w = (0.1 * torch::randn({in, out}, opts)).detach().requires_grad_(true);
      auto b = torch::randn({out}, opts).requires_grad_(true);
      const auto y = fused_biased_matmul(x, w, b);
      const auto gy = torch::randn_like(y);
      y.backward(gy);
      auto x32 = fp32_leaf(x), w32 = fp32_leaf(w), b32 = fp32_leaf(b);
      const auto ref = torch::matmul(x32, w32) + b32;
      ref.backward(gy.to(torch::kFloat));
      CHECK(y.sizes() == torch::IntArrayRef({1, rows, out}));
      check_against_fp32(y, {x, w, b}, ref, {x32, w32, b32}, tolerance_for(type));
    }
  }
}

TEST_CASE(
    "the biased GELU gives gelu_tanh(x W + b) and its gradients, the bias's summed in GELU's "
    "backward kernel, for Conv1D and Linear weights, vectorised or not",
    "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(12);
  // 3072 columns: 16-byte groups over several chunks of 1100 rows; 37: one element at a time.
  for (const auto& [rows, in, out] :
       std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{{1100, 64, 3072}, {7, 16, 37}}) {
    for (const bool conv1d : {true, false}) {
      for (const auto type : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
        INFO("dtype " << c10::toString(type) << " rows " << rows << " out " << out << " conv1d " << conv1d);
        const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(type);
        auto x = torch::randn({1, rows, in}, opts).requires_grad_(true);
        const auto shape = conv1d ? std::vector<std::int64_t>{in, out} : std::vector<std::int64_t>{out, in};
        auto w = (0.3 * torch::randn(shape, opts)).detach().requires_grad_(true);
        auto b = torch::randn({out}, opts).requires_grad_(true);
        const auto y = fused_biased_gelu(x, w, b, conv1d);
        const auto gy = torch::randn_like(y);
        y.backward(gy);
        auto x32 = fp32_leaf(x), w32 = fp32_leaf(w), b32 = fp32_leaf(b);
        const auto ref = torch::gelu(torch::matmul(x32, conv1d ? w32 : w32.t()) + b32, "tanh");
        ref.backward(gy.to(torch::kFloat));
        CHECK(y.sizes() == torch::IntArrayRef({1, rows, out}));
        check_against_fp32(y, {x, w, b}, ref, {x32, w32, b32}, tolerance_for(type));
      }
    }
  }
}

TEST_CASE("the AdamW kernel reads a clipping coefficient on the device as the host's value",
          "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(9);
  adamw_options o;
  o.lr = 1e-3;
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  auto host_master = torch::randn({4096}, cuda), device_master = host_master.clone();
  adamw_state host_state, device_state;
  for (int step = 0; step < 2; ++step) {
    const auto grad = torch::randn({4096}, cuda).to(torch::kBFloat16);
    const auto squares = fused_square_sum(grad);
    const auto coef = clip_coefficient(squares, 0.5);  // on the device, not read
    CHECK(coef.is_cuda());
    fused_adamw_step(host_master, grad, host_state, o, clip_coefficient(std::sqrt(squares.item<double>()), 0.5),
                     torch::Tensor());
    fused_adamw_step(device_master, grad, device_state, o, 1.0, torch::Tensor(), coef);
  }
  CHECK(torch::equal(device_master, host_master));
  CHECK(torch::equal(device_state.exp_avg_sq, host_state.exp_avg_sq));
}

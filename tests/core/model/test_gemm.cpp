// The fused path's GEMMs (core/model/gemm.hpp): ATen's products on the CPU, bit for bit; on a GPU
// ([.gpu]: `test_core_model "[gpu]"` in the CUDA build), with timed picks on, cuBLASLt's with each
// shape's algorithm picked by timing, within the rounding of another summation order, the same
// bits on every call.
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/model/gemm.hpp"

#include "tests/support/catch_torch.hpp"

using namespace cohort::core::model;

namespace {

// a (M, K) and b (K, N) laid out as asked: rows contiguous, or a transposed view.
torch::Tensor laid_out(std::int64_t rows, std::int64_t cols, bool transposed, const torch::TensorOptions& o) {
  return transposed ? torch::randn({cols, rows}, o).t() : torch::randn({rows, cols}, o);
}

struct layout {
  bool a_transposed, b_transposed;
};

const std::vector<layout> layouts = {{false, false}, {false, true}, {true, false}, {true, true}};

}  // namespace

TEST_CASE("on the CPU a GEMM is ATen's bit for bit in every layout, with a bias and accumulated",
          "[core][model]") {
  torch::manual_seed(1);
  const auto o = torch::TensorOptions().dtype(torch::kFloat);
  for (const auto& l : layouts) {
    INFO("a transposed " << l.a_transposed << ", b transposed " << l.b_transposed);
    const auto a = laid_out(33, 20, l.a_transposed, o), b = laid_out(20, 17, l.b_transposed, o);
    CHECK(torch::equal(gemm::mm(a, b), at::mm(a, b)));
    const auto bias = torch::randn({17}, o);
    auto out = torch::empty({33, 17}, o);
    gemm::mm_into(out, a, b, false, bias);
    CHECK(torch::equal(out, at::addmm(bias, a, b)));
    const auto before = torch::randn({33, 17}, o);
    out.copy_(before);
    gemm::mm_into(out, a, b, /*accumulate=*/true);
    CHECK(torch::equal(out, before + at::mm(a, b)));
    const auto x = torch::randn({2, 5, 20}, o), w = torch::randn({17, 20}, o);
    CHECK(torch::allclose(gemm::linear(x, w, bias), torch::linear(x, w, bias), 1e-6, 1e-6));
  }
}

TEST_CASE("a GEMM whose sizes do not chain is refused with the sizes given", "[core][model]") {
  const auto a = torch::zeros({4, 3}), b = torch::zeros({5, 2});
  auto out = torch::zeros({4, 2});
  CHECK_THROWS_WITH(gemm::mm_into(out, a, b), Catch::Contains("a [4, 3], b [5, 2]"));
  CHECK_THROWS_WITH(gemm::mm_into(torch::zeros({4, 5}), a, torch::zeros({3, 5}), true, torch::zeros({5})),
                    Catch::Contains("without accumulate"));
}

TEST_CASE(
    "on a GPU the timed GEMMs give the fp32 product within bf16 rounding in every layout, into "
    "bf16 or fp32, with a bias, accumulated and at odd offsets, the same bits on every call",
    "[core][model][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  torch::manual_seed(2);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  const int timed_before = gemm::tuning().timed;
  gemm::set_timed_picks(true);
  for (const auto& l : layouts) {
    for (std::int64_t offset : {0, 1}) {  // 1: every operand 2 bytes past an aligned address
      INFO("a transposed " << l.a_transposed << ", b transposed " << l.b_transposed << ", offset " << offset);
      const std::int64_t M = 520, K = 264, N = 392;
      const auto a = laid_out(M, K, l.a_transposed, bf16), b = laid_out(K, N, l.b_transposed, bf16);
      auto a_store = torch::empty({M * K + offset}, bf16);
      auto a_off = a_store.narrow(0, offset, M * K).view({M, K});
      a_off.copy_(a);
      const auto expected = at::mm(a.to(torch::kFloat), b.to(torch::kFloat));
      const auto scale = expected.abs().max().item<double>();
      const auto y = gemm::mm(a_off, b);
      CHECK((y.to(torch::kFloat) - expected).abs().max().item<double>() <= 1e-2 * scale);
      CHECK(torch::equal(gemm::mm(a, b), gemm::mm(a, b)));

      const auto bias = torch::randn({N}, bf16);
      auto biased_store = torch::empty({M * N + offset}, bf16);
      auto biased = biased_store.narrow(0, offset, M * N).view({M, N});
      gemm::mm_into(biased, a, b, false, bias);
      CHECK((biased.to(torch::kFloat) - expected - bias.to(torch::kFloat)).abs().max().item<double>() <=
            1e-2 * scale);

      auto wide = torch::randn({M, N}, bf16.dtype(torch::kFloat));
      const auto before = wide.clone();
      gemm::mm_into(wide, a, b);
      CHECK((wide - expected).abs().max().item<double>() <= 1e-4 * scale);  // fp32 out: no bf16 rounding
      wide.copy_(before);
      gemm::mm_into(wide, a, b, /*accumulate=*/true);
      CHECK((wide - before - expected).abs().max().item<double>() <= 1e-4 * scale);
    }
  }
  CHECK(gemm::tuning().timed > timed_before);  // cuBLASLt took them, not ATen

  // Deterministic runs keep ATen's GEMM, bit for bit.
  const auto a = torch::randn({256, 128}, bf16), b = torch::randn({128, 64}, bf16);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  const auto deterministic = gemm::mm(a, b);
  at::globalContext().setDeterministicAlgorithms(false, false);
  gemm::set_timed_picks(false);
  CHECK(torch::equal(deterministic, at::mm(a, b)));
}

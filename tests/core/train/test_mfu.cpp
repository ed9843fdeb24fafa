// Tests of the model FLOPs utilisation (MFU) of a training run.
#include "core/train/mfu.hpp"

#include "tests/support/catch_torch.hpp"

using namespace cohort::core::train;

TEST_CASE("FLOPs per token count 6N plus the attention scores' 12·L·d·T", "[core][train]") {
  CHECK(flops_per_token(1000, 2, 8, 16) == Approx(6.0 * 1000 + 12.0 * 2 * 8 * 16));
  // TinyLlama-1.1B's shape at seq 2048: 6.6 GFLOP of weights, 1.1 GFLOP of attention per token.
  CHECK(flops_per_token(1'100'048'384, 22, 2048, 2048) == Approx(7.707e9).epsilon(1e-3));
}

TEST_CASE("the bf16 peak is looked up by the device name the driver reports", "[core][train]") {
  CHECK(peak_bf16_flops("NVIDIA H100 80GB HBM3") == Approx(989.4e12));
  CHECK(peak_bf16_flops("NVIDIA H200") == Approx(989.4e12));
  CHECK(peak_bf16_flops("NVIDIA H100 PCIe") == Approx(756e12));
  CHECK(peak_bf16_flops("NVIDIA H100 NVL") == Approx(835e12));
  CHECK(peak_bf16_flops("NVIDIA H200 NVL") == Approx(835e12));
  CHECK(peak_bf16_flops("NVIDIA A100-SXM4-80GB") == Approx(312e12));
  CHECK(peak_bf16_flops("NVIDIA GeForce GTX 1080") == 0);
  CHECK(peak_bf16_flops("") == 0);
}

TEST_CASE("MFU divides achieved FLOP/s by the peak of every GPU of the group, 0 when unknown",
          "[core][train]") {
  CHECK(mfu(50'000, 7.7e9, 989.4e12, 1) == Approx(50'000 * 7.7e9 / 989.4e12));
  CHECK(mfu(50'000, 7.7e9, 989.4e12, 2) == Approx(50'000 * 7.7e9 / (2 * 989.4e12)));
  CHECK(mfu(50'000, 7.7e9, 0, 2) == 0);  // CPU or an unknown card
  CHECK(mfu(0, 7.7e9, 989.4e12, 2) == 0);
}

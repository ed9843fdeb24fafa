// The measure the model tests compare tensors by: the largest difference of `actual` from
// `expected` (each of any float dtype, compared in fp32), relative to the largest value expected.
#pragma once

#include <torch/torch.h>

namespace cohort::test {

inline double relative_gap(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto e = expected.to(torch::kFloat);
  return ((actual.to(torch::kFloat) - e).abs().max() / e.abs().max()).item<double>();
}

}  // namespace cohort::test

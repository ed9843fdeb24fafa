// Helpers of the golden tests against transformers' references: JSON arrays as tensors, the
// weights of a Hugging Face directory, and the check of one AdamW step against the reference's.
// Include it after <catch2/catch.hpp> (its checks are Catch's).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/utils.h>

#include "core/model/adamw.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/safetensors.hpp"

namespace cohort::test {

using core::model::adamw_options;
using core::model::dtype_from_name;
using core::model::safetensors_reader;
using nlohmann::json;

// A nested JSON array of numbers as a tensor of `dtype`.
inline torch::Tensor to_tensor(const json& j, torch::ScalarType dtype) {
  std::vector<std::int64_t> shape;
  for (const json* p = &j; p->is_array(); p = &(*p)[0]) shape.push_back(static_cast<std::int64_t>(p->size()));
  std::vector<double> flat;
  std::function<void(const json&)> walk = [&](const json& x) {
    if (x.is_array()) {
      for (const auto& y : x) walk(y);
    } else {
      flat.push_back(x.get<double>());
    }
  };
  walk(j);
  return torch::tensor(flat, torch::kDouble).reshape(shape).to(dtype);
}

// Every tensor of an HF directory, by name, as fp32.
inline std::map<std::string, torch::Tensor> read_weights(const std::string& dir) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    safetensors_reader r(entry.path().string());
    for (const auto& e : r.tensors()) {
      auto t = torch::empty(e.shape, torch::TensorOptions().dtype(dtype_from_name(e.dtype)));
      r.read(e, t.data_ptr());
      out[e.name] = t.to(torch::kFloat);
    }
  }
  return out;
}

// Adam's first step moves a weight by lr * g / (|g| + eps): a whole lr unless |g| is within a
// few eps of zero. There g is rounding noise (a key bias, whose true gradient is 0, or a
// cancelling sum) and the step follows the noise's sign, which no two BLAS builds share. Such
// weights (a step between 1e-4 lr and 0.99 lr, in the reference or here) are held to one step's
// bound; the rest to 1e-5. Returns how many weights were held to the loose bound.
inline std::int64_t check_step(const torch::Tensor& before, const torch::Tensor& ours,
                        const torch::Tensor& ref, const adamw_options& o) {
  const auto decayed = before.to(torch::kDouble) * (1 - o.lr * o.weight_decay);
  const auto band = [&](const torch::Tensor& after) {
    auto step = (after.to(torch::kDouble) - decayed).abs();
    return step.lt(0.99 * o.lr).logical_and(step.gt(1e-4 * o.lr));
  };
  auto noise = band(ref).logical_or(band(ours));
  auto diff = (ours.to(torch::kDouble) - ref.to(torch::kDouble)).abs();
  CHECK(diff.max().item<double>() <= 2 * o.lr + 1e-6);
  auto clean = diff.masked_select(noise.logical_not());
  if (clean.numel() > 0) CHECK(clean.max().item<double>() < 1e-5);
  return noise.sum().item<std::int64_t>();
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace cohort::test

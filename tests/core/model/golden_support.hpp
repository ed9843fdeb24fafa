// Helpers of the golden tests against transformers' references: JSON arrays as tensors, the
// weights of a Hugging Face directory, and the check of one AdamW step against the reference's.
// Include it after tests/support/catch_torch.hpp (its checks are Catch's).
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
#include "tests/support/files.hpp"

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

// The reference's clipped AdamW step (reference.json's train_step) on `weights`, whose .grad the
// caller's backward filled: the norm before clipping, then every weight against DIR/after_one_step
// (check_step), fewer than one in twenty held to the loose bound.
inline void check_one_step(const std::string& dir, const std::vector<core::model::hf_parameter>& weights) {
  const json s = json::parse(read_file(dir + "/reference.json"))["train_step"];
  std::vector<torch::Tensor> params, grads;
  std::int64_t count = 0;
  for (const auto& p : weights) {
    INFO(p.name);
    REQUIRE(p.tensor.grad().defined());
    params.push_back(p.tensor);
    grads.push_back(p.tensor.grad());
    count += p.tensor.numel();
  }
  const double norm = core::model::clip_grad_norm(grads, s["grad_clip"].get<double>());
  const double want_norm = s["grad_norm_before_clip"].get<double>();
  CHECK(std::abs(norm - want_norm) <= 1e-5 * want_norm);
  const adamw_options o{s["lr"].get<double>(), s["betas"][0].get<double>(), s["betas"][1].get<double>(),
                        s["eps"].get<double>(), s["weight_decay"].get<double>()};
  for (std::size_t i = 0; i < params.size(); ++i) {
    core::model::adamw_state state;
    core::model::adamw_step(params[i], grads[i], state, o);
  }
  const auto before = read_weights(dir);
  const auto after = read_weights(dir + "/after_one_step");
  CHECK(after.size() == weights.size());
  std::int64_t loose = 0;
  for (const auto& p : weights) {
    INFO(p.name);
    REQUIRE(after.count(p.name) == 1);
    loose += check_step(before.at(p.name), p.tensor.detach(), after.at(p.name), o);
  }
  CHECK(loose < count / 20);
}

// OUT, written by a save of DIR's model of `weights` tensors, holds that many, each bit for bit
// DIR's, and every key of DIR's config.json with its value (transformers_version aside).
inline void check_saved_copy(const std::string& dir, const std::string& out, std::size_t weights) {
  const auto original = read_weights(dir);
  const auto saved = read_weights(out);
  CHECK(saved.size() == weights);
  for (const auto& [name, t] : saved) {
    INFO(name);
    REQUIRE(original.count(name) == 1);
    CHECK(torch::equal(t, original.at(name)));
  }
  const json a = json::parse(read_file(dir + "/config.json"));
  const json b = json::parse(read_file(out + "/config.json"));
  for (const auto& [key, value] : a.items()) {
    if (key == "transformers_version") continue;
    INFO(key);
    CHECK(b.at(key) == value);
  }
}

// Two models' weights: same names, dtypes and values.
inline void check_same_weights(const std::vector<core::model::hf_parameter>& a,
                               const std::vector<core::model::hf_parameter>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].name);
    CHECK(a[i].name == b[i].name);
    CHECK(a[i].tensor.scalar_type() == b[i].tensor.scalar_type());
    CHECK(torch::equal(a[i].tensor, b[i].tensor));
  }
}

}  // namespace cohort::test

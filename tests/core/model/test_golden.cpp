// Golden tests against references written by transformers: logits, loss, one clipped AdamW
// step; and save -> load round trips, bit for bit.
#include <filesystem>

#include <ATen/Parallel.h>
#include <torch/utils.h>

#include "core/model/adamw.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/model_error.hpp"
#include "core/model/safetensors.hpp"
#include "tests/core/model/model_test_support.hpp"
#include "tests/support/temp_dir.hpp"

#include "tests/support/catch_torch.hpp"

#include "tests/core/model/golden_support.hpp"

using namespace cohort::core::model;
using cohort::test::check_one_step;
using cohort::test::check_same_weights;
using cohort::test::check_saved_copy;
using cohort::test::max_abs_diff;
using cohort::test::read_json;
using cohort::test::read_weights;
using cohort::test::to_tensor;
using cohort::test::temp_dir;
using nlohmann::json;

namespace {

// tiny-gpt2's after_one_step was evidently taken with its 0.1 dropout active (its gradient norm
// is 1.6% off the deterministic one while its logits match), so GPT-2's step is checked on
// gpt2-variant, generated with dropout 0.
std::vector<std::string> step_dirs() {
  return {cohort::test::shared_fixture("tiny-llama"), cohort::test::local_fixture("mistral"),
          cohort::test::local_fixture("qwen2"), cohort::test::local_fixture("opt"),
          cohort::test::local_fixture("opt-prenorm"), cohort::test::local_fixture("gptj"),
          cohort::test::local_fixture("llama-variant"), cohort::test::local_fixture("gpt2-variant")};
}

std::vector<std::string> golden_dirs() {
  return {cohort::test::shared_fixture("tiny-llama"), cohort::test::shared_fixture("tiny-gpt2"),
          cohort::test::local_fixture("mistral"), cohort::test::local_fixture("qwen2"),
          cohort::test::local_fixture("opt"), cohort::test::local_fixture("opt-prenorm"),
          cohort::test::local_fixture("gptj"), cohort::test::local_fixture("llama-variant"),
          cohort::test::local_fixture("gpt2-variant")};
}

}  // namespace

TEST_CASE("logits and loss match transformers for every reference model", "[core][model]") {
  for (const auto& dir : golden_dirs()) {
    INFO(dir);
    const json ref = read_json(dir + "/reference.json");
    auto model = load_hf_model(dir, {torch::kFloat});
    auto ids = to_tensor(ref["input_ids"], torch::kInt64);
    torch::NoGradGuard no_grad;
    auto out = model->forward(ids, ids);
    CHECK(max_abs_diff(out.logits, to_tensor(ref["logits"], torch::kFloat)) < 1e-4);
    const double loss = ref["loss"].get<double>();
    CHECK(std::abs(out.loss.item<double>() - loss) <= 1e-5 * std::abs(loss));
    if (ref.contains("labels_masked")) {  // labels of -100 are left out of the mean
      auto masked = model->forward(ids, to_tensor(ref["labels_masked"], torch::kInt64));
      const double want = ref["loss_masked"].get<double>();
      CHECK(std::abs(masked.loss.item<double>() - want) <= 1e-5 * std::abs(want));
    }
  }
}

TEST_CASE("one clipped AdamW step matches torch.optim.AdamW for every reference model",
          "[core][model]") {
  for (const auto& dir : step_dirs()) {
    INFO(dir);
    const json ref = read_json(dir + "/reference.json");
    auto model = load_hf_model(dir, {torch::kFloat});
    auto ids = to_tensor(ref["input_ids"], torch::kInt64);
    for (const auto& p : model->hf_parameters()) p.tensor.set_requires_grad(true);
    model->forward(ids, ids).loss.backward();
    check_one_step(dir, model->hf_parameters());
  }
}

TEST_CASE("a model saved and loaded again is bit for bit the same", "[core][model]") {
  for (const auto& dir : golden_dirs()) {
    INFO(dir);
    auto model = load_hf_model(dir);  // in the stored dtype
    temp_dir out;
    save_options so;
    so.copy_files_from = dir;
    save_hf_model(*model, out.str(), so);
    CHECK(std::filesystem::exists(out.path("generation_config.json")));
    // Same dtypes on disk, same config fields.
    check_saved_copy(dir, out.str(), model->hf_parameters().size());
    check_same_weights(load_hf_model(out.str())->hf_parameters(), model->hf_parameters());
  }
}

TEST_CASE("a model above the shard limit is written as shards with an index", "[core][model]") {
  const std::string dir = cohort::test::shared_fixture("tiny-llama");
  auto model = load_hf_model(dir);
  temp_dir out;
  save_options so;
  so.max_shard_bytes = 200'000;
  save_hf_model(*model, out.str(), so);
  CHECK_FALSE(std::filesystem::exists(out.path("model.safetensors")));
  const json index = read_json(out.path("model.safetensors.index.json"));
  CHECK(index["metadata"]["total_size"] == 4 * model->parameter_count());
  CHECK(std::filesystem::exists(out.path("model-00001-of-00004.safetensors")));
  auto again = load_hf_model(out.str());
  for (std::size_t i = 0; i < again->hf_parameters().size(); ++i) {
    CHECK(torch::equal(again->hf_parameters()[i].tensor, model->hf_parameters()[i].tensor));
  }
  // Saving unsharded into the same directory removes the stale shards.
  save_hf_model(*model, out.str());
  CHECK_FALSE(std::filesystem::exists(out.path("model.safetensors.index.json")));
  CHECK_FALSE(std::filesystem::exists(out.path("model-00001-of-00004.safetensors")));
}

TEST_CASE("weights missing, misshapen or unexpected are refused naming file and tensor",
          "[core][model]") {
  const std::string dir = cohort::test::shared_fixture("tiny-llama");
  auto model = load_hf_model(dir);
  const auto check_refusal = [&](const std::vector<tensor_blob>& blobs, const std::string& part) {
    temp_dir out;
    std::filesystem::copy_file(dir + "/config.json", out.path("config.json"));
    write_safetensors(out.path("model.safetensors"), blobs);
    try {
      load_hf_model(out.str());
      FAIL("accepted");
    } catch (const model_error& e) {
      CHECK(e.code() == model_errc::bad_weights);
      CHECK_THAT(e.what(), Catch::Contains(out.path("model.safetensors")) && Catch::Contains(part));
    }
  };
  std::vector<torch::Tensor> keep;
  std::vector<tensor_blob> blobs;
  for (const auto& p : model->hf_parameters()) {
    keep.push_back(p.tensor.contiguous());
    blobs.push_back({p.name, "F32", p.tensor.sizes().vec(), keep.back().data_ptr(),
                     static_cast<std::size_t>(p.tensor.numel() * 4)});
  }
  auto missing = blobs;
  missing.erase(missing.begin() + 3);
  check_refusal(missing, "missing tensor '" + blobs[3].name + "'");

  auto misshapen = blobs;
  misshapen[3].shape = {misshapen[3].shape[1], misshapen[3].shape[0]};
  check_refusal(misshapen, "'" + blobs[3].name + "' has shape");

  auto extra = blobs;
  extra.push_back({"model.layers.9.mlp.up_proj.weight", "F32", {1}, keep[0].data_ptr(), 4});
  check_refusal(extra, "unexpected tensor 'model.layers.9.mlp.up_proj.weight'");

  temp_dir empty;
  std::filesystem::copy_file(dir + "/config.json", empty.path("config.json"));
  CHECK_THROWS_WITH(load_hf_model(empty.str()), Catch::Contains("no model.safetensors"));
}

TEST_CASE("sharded checkpoints written by transformers load through their index", "[core][model]") {
  const std::string dir = cohort::test::local_fixture("gptj");
  REQUIRE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
  auto model = load_hf_model(dir);
  const auto original = read_weights(dir);
  for (const auto& p : model->hf_parameters()) CHECK(torch::equal(p.tensor, original.at(p.name)));
}

TEST_CASE("the one-pass host AdamW step is the torch-ops step within fp32 rounding on any thread count",
          "[core][model]") {
  torch::manual_seed(3);
  const std::int64_t n = 300001;  // not a multiple of the parallel grain
  const auto param0 = torch::randn({n});
  const adamw_options o{1e-3, 0.9, 0.95, 1e-8, 0.1};
  const double clip = 0.37;
  const auto run_host = [&](int threads, torch::Tensor copy) {
    const int before = at::get_num_threads();
    at::set_num_threads(threads);
    auto p = param0.clone();
    adamw_state s;
    for (int step = 0; step < 3; ++step) {
      const auto g = torch::randn({n}, torch::TensorOptions().dtype(torch::kFloat)) * (step + 1);
      adamw_step_host(p, g, s, o, clip, copy);
    }
    at::set_num_threads(before);
    return std::make_pair(p, s);
  };
  torch::manual_seed(4);
  auto bf16 = torch::empty({n}, torch::kBFloat16);
  const auto [one, one_state] = run_host(1, bf16);
  torch::manual_seed(4);
  const auto [two, two_state] = run_host(2, torch::Tensor());
  CHECK(torch::equal(one, two));  // element-wise: the thread count cannot change a value
  CHECK(torch::equal(one_state.exp_avg_sq, two_state.exp_avg_sq));
  CHECK(torch::equal(bf16, one.to(torch::kBFloat16)));
  CHECK(one_state.step == 3);

  torch::manual_seed(4);
  auto p = param0.clone();
  adamw_state s;
  for (int step = 0; step < 3; ++step) {
    auto g = torch::randn({n}, torch::TensorOptions().dtype(torch::kFloat)) * (step + 1);
    adamw_step(p, g.mul_(clip), s, o);
  }
  CHECK((p - one).abs().max().item<float>() <= 1e-6f);
  CHECK((s.exp_avg - one_state.exp_avg).abs().max().item<float>() <= 1e-6f);

  const auto g = torch::randn({n});
  const double want = g.to(torch::kDouble).pow(2).sum().item<double>();
  CHECK(std::abs(host_square_sum(g) - want) <= 1e-12 * want);

  adamw_state fresh;
  CHECK_THROWS_AS(adamw_step_host(param0.to(torch::kHalf), g, fresh, o, 1.0, torch::Tensor()),
                  std::invalid_argument);
  CHECK_THROWS_AS(adamw_step_host(param0.clone(), g.narrow(0, 0, n - 1), fresh, o, 1.0, torch::Tensor()),
                  std::invalid_argument);
}

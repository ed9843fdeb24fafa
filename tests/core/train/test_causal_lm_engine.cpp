// Tests of the causal-LM engine: it learns, and every ZeRO stage computes the same training.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/gemm.hpp"
#include "core/model/model_config.hpp"
#include "core/train/memory_estimate.hpp"
#include "tests/core/train/engine_fixture.hpp"

#include "tests/support/catch_torch.hpp"

using namespace cohort;
using cohort::test::temp_dir;

namespace {

using cohort::test::relative;

// Largest |a - b| relative to the largest weight (norm weights start at 1, so this is close to
// the absolute difference), and the relative L2 distance ||a - b|| / ||b||.
struct weight_gap {
  double max_relative = 0;
  double l2_relative = 0;
};
weight_gap weight_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0, largest = 0, diff2 = 0, norm2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    worst = std::max(worst, std::abs(d));
    largest = std::max(largest, std::abs(static_cast<double>(b[i])));
    diff2 += d * d;
    norm2 += static_cast<double>(b[i]) * b[i];
  }
  return {worst / largest, std::sqrt(diff2 / norm2)};
}

// Runs the job on each world size and checks every step's loss and the final weights against
// the first world size's run (and that all ranks of a run agree).
void check_world_size_invariance(int stage, bool offload, const std::vector<int>& worlds) {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  std::vector<test::run_output> reference;
  for (int world : worlds) {
    INFO("stage " << stage << (offload ? " with offload" : "") << ", world size " << world);
    auto outputs = test::run_job(test::tiny_job(data, world, stage, offload));
    REQUIRE(outputs.size() == static_cast<std::size_t>(world));
    REQUIRE(outputs[0].steps.size() == 20);
    for (std::size_t r = 1; r < outputs.size(); ++r) {
      CHECK(outputs[r].weights == outputs[0].weights);
      for (std::size_t k = 0; k < 20; ++k) CHECK(outputs[r].steps[k].loss == outputs[0].steps[k].loss);
    }
    if (reference.empty()) {
      reference = outputs;
      continue;
    }
    for (std::size_t k = 0; k < 20; ++k) {
      INFO("step " << k + 1);
      CHECK(relative(outputs[0].steps[k].loss, reference[0].steps[k].loss) <= 1e-5);
      CHECK(relative(outputs[0].steps[k].grad_norm, reference[0].steps[k].grad_norm) <= 1e-4);
      CHECK(outputs[0].steps[k].lr == reference[0].steps[k].lr);
      CHECK(outputs[0].steps[k].tokens == reference[0].steps[k].tokens);
    }
    const auto gap = weight_difference(outputs[0].weights, reference[0].weights);
    CAPTURE(gap.max_relative, gap.l2_relative);
    CHECK(gap.max_relative <= 1e-5);
    CHECK(gap.l2_relative <= 1e-5);
  }
}

}  // namespace

TEST_CASE("a tiny Llama learns: loss starts near ln(vocab) and falls over 20 steps", "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  const auto out = test::run_job(test::tiny_job(data, 1, 0, false));
  const auto& steps = out[0].steps;
  REQUIRE(steps.size() == 20);
  CHECK(steps[0].step == 1);
  CHECK(steps[19].step == 20);
  CHECK(std::abs(steps[0].loss - std::log(300.0)) < 0.1);
  CHECK(steps[19].loss < steps[0].loss - 0.5);
  CHECK(steps[0].lr == 0.0);  // warmup starts at 0
  CHECK(steps[3].lr == Approx(1e-2));
  CHECK(steps[19].grad_norm > 0);
  CHECK(steps[0].tokens > 0);
}

TEST_CASE("every ZeRO stage, with and without offload, gives the same losses and weights on 1, 2 "
          "and 4 ranks", "[core][train]") {
  for (int stage = 0; stage <= 3; ++stage)
    for (bool offload : {false, true}) check_world_size_invariance(stage, offload, {1, 2, 4});
}

TEST_CASE("all ZeRO stages and activation checkpointing compute the same training", "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  const auto base = test::run_job(test::tiny_job(data, 2, 0, false));
  for (int stage = 1; stage <= 3; ++stage) {
    INFO("stage " << stage);
    const auto out = test::run_job(test::tiny_job(data, 2, stage, stage == 1));
    for (std::size_t k = 0; k < 20; ++k)
      CHECK(relative(out[0].steps[k].loss, base[0].steps[k].loss) <= 1e-5);
    const auto gap = weight_difference(out[0].weights, base[0].weights);
    CAPTURE(gap.max_relative, gap.l2_relative);
    CHECK(gap.max_relative <= 1e-5);
  }
  for (int stage : {0, 2, 3}) {
    INFO("activation checkpointing, stage " << stage);
    auto spec = test::tiny_job(data, 2, stage, false);
    spec.train.activation_checkpointing = true;
    const auto checkpointed = test::run_job(spec);
    for (std::size_t k = 0; k < 20; ++k)
      CHECK(relative(checkpointed[0].steps[k].loss, base[0].steps[k].loss) <= 1e-5);
    CHECK(weight_difference(checkpointed[0].weights, base[0].weights).max_relative <= 1e-5);
  }
}

TEST_CASE("bf16 compute with fp32 master weights tracks the fp32 loss", "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  const auto fp32 = test::run_job(test::tiny_job(data, 2, 1, false));
  auto spec = test::tiny_job(data, 2, 1, false);
  spec.train.dtype = config::precision::bf16;
  const auto bf16 = test::run_job(spec);
  double worst = 0;
  for (std::size_t k = 0; k < 20; ++k)
    worst = std::max(worst, relative(bf16[0].steps[k].loss, fp32[0].steps[k].loss));
  CHECK(worst > 0);      // it really computed in bf16
  CHECK(worst < 0.03);   // and stayed close
  CHECK(bf16[0].steps[19].loss < bf16[0].steps[0].loss - 0.5);
  // ZeRO-3 gathers bf16 weights into its layers' buffers, frees and refills them.
  spec.zero.stage = 3;
  const auto bf16_stage3 = test::run_job(spec);
  double gap = 0;
  for (std::size_t k = 0; k < 20; ++k)
    gap = std::max(gap, relative(bf16_stage3[0].steps[k].loss, bf16[0].steps[k].loss));
  CAPTURE(gap);
  CHECK(gap < 0.02);
  CHECK(bf16_stage3[0].steps[19].loss < bf16_stage3[0].steps[0].loss - 0.5);
}

TEST_CASE("a data set whose ids exceed the model's vocabulary is refused, naming both",
          "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"), 400);
  try {
    test::run_job(test::tiny_job(data, 1, 0, false));
    FAIL("expected an error");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Catch::Contains("data.train") && Catch::Contains("vocab_size 300"));
  }
}

TEST_CASE(
    "train.cuda_graph is refused with the reason named for recomputation, ZeRO-3, reward "
    "models and dropout, applies otherwise, and says nothing when turned off",
    "[core][train]") {
  using core::train::causal_lm_engine;
  config::job_spec spec;
  CHECK(causal_lm_engine::step_graph_refusal(spec, false).empty());
  spec.zero.stage = 2;
  CHECK(causal_lm_engine::step_graph_refusal(spec, false).empty());
  CHECK_THAT(causal_lm_engine::step_graph_refusal(spec, true),
             Catch::Contains("train.cuda_graph") && Catch::Contains("dropout"));
  auto recomputed = spec;
  recomputed.train.activation_checkpointing = true;
  CHECK_THAT(causal_lm_engine::step_graph_refusal(recomputed, false),
             Catch::Contains("train.activation_checkpointing"));
  auto stage3 = spec;
  stage3.zero.stage = 3;
  CHECK_THAT(causal_lm_engine::step_graph_refusal(stage3, false), Catch::Contains("ZeRO stage 3"));
  auto reward = spec;
  reward.workload = config::workload_kind::reward_model;
  CHECK_THAT(causal_lm_engine::step_graph_refusal(reward, false), Catch::Contains("reward_model"));
  stage3.train.cuda_graph = false;
  CHECK(causal_lm_engine::step_graph_refusal(stage3, true).empty());
}

TEST_CASE("on a CPU a job says nothing about CUDA graphs and trains as before", "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  auto spec = test::tiny_job(data, 1, 0, false);
  spec.train.max_steps = 3;
  const auto run = test::run_job(spec);
  CHECK(run[0].steps.size() == 3);
  CHECK_FALSE(run[0].graphed);
  CHECK(run[0].graph_status.empty());
}

TEST_CASE(
    "a job of one rank turns timed GEMM picks on, a job of two ranks turns them off; both turn "
    "the own GEMM on, rotary in it too",
    "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  auto spec = test::tiny_job(data, 1, 0, false);
  spec.train.max_steps = 1;
  core::model::gemm::set_own_gemm(false);
  core::model::gemm::set_own_gemm_rotary(false);
  test::run_job(spec);
  CHECK(core::model::gemm::timed_picks());
  CHECK(core::model::gemm::own_gemm());
  CHECK(core::model::gemm::own_gemm_rotary());
  spec = test::tiny_job(data, 2, 3, false);
  spec.train.max_steps = 1;
  core::model::gemm::set_own_gemm(false);
  test::run_job(spec);
  CHECK_FALSE(core::model::gemm::timed_picks());
  CHECK(core::model::gemm::own_gemm());
  core::model::gemm::set_own_gemm(false);
}

TEST_CASE("a malformed inline model config is refused, naming model.config", "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  auto spec = test::tiny_job(data, 1, 0, false);
  spec.model.inline_config_json = "{not json";
  CHECK_THROWS_WITH(test::run_job(spec), Catch::Contains("model.config"));
}

TEST_CASE("with dropout, layer recomputation drops what the first pass dropped, and ZeRO-3's kept "
          "layer graphs drop what one whole graph drops", "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  // One rank: dropout draws from torch's global generator, which rank threads would share.
  auto spec = test::tiny_job(data, 1, 0, false);
  spec.train.max_steps = 5;
  const auto no_dropout = test::run_job(spec);
  auto config = nlohmann::json::parse(spec.model.inline_config_json);
  config["attention_dropout"] = 0.2;
  spec.model.inline_config_json = config.dump();
  const auto plain = test::run_job(spec);
  CHECK(plain[0].steps[4].loss != no_dropout[0].steps[4].loss);  // dropout is on
  for (const auto& [stage, checkpointing] : std::vector<std::pair<int, bool>>{{0, true}, {3, true}, {3, false}}) {
    INFO("stage " << stage << (checkpointing ? " with" : " without") << " activation checkpointing");
    auto layered = spec;
    layered.zero.stage = stage;
    layered.train.activation_checkpointing = checkpointing;
    const auto out = test::run_job(layered);
    for (std::size_t k = 0; k < 5; ++k)
      CHECK(relative(out[0].steps[k].loss, plain[0].steps[k].loss) <= 1e-6);
    CHECK(weight_difference(out[0].weights, plain[0].weights).max_relative <= 1e-6);
  }
}

TEST_CASE("ZeRO-3 with parameter offload trains exactly as ZeRO-3 with optimizer offload alone",
          "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  for (int world : {1, 2}) {
    INFO("world size " << world);  // world 2 accumulates 2 micro-batches per step
    auto spec = test::tiny_job(data, world, 3, true);
    const auto base = test::run_job(spec);
    spec.zero.offload_param = config::offload_device::cpu;
    const auto offloaded = test::run_job(spec);
    for (std::size_t k = 0; k < 20; ++k) {
      CHECK(offloaded[0].steps[k].loss == base[0].steps[k].loss);
      CHECK(offloaded[0].steps[k].grad_norm == base[0].steps[k].grad_norm);
    }
    CHECK(offloaded[0].weights == base[0].weights);
  }
}

namespace {

// tiny_job with `layers` decoder layers instead of 2.
config::job_spec deep_job(const std::string& data, int world, int stage, int layers) {
  return test::with_layers(test::tiny_job(data, world, stage, false), layers);
}

}  // namespace

TEST_CASE("ZeRO-3 without recomputation trains as stage 0 and as ZeRO-3 with recomputation",
          "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  for (int world : {2, 4}) {
    INFO("world size " << world << ", 4 layers");  // world 2: 2 micro-batches per step
    const auto base = test::run_job(deep_job(data, world, 0, 4));
    const auto kept = test::run_job(deep_job(data, world, 3, 4));
    auto spec = deep_job(data, world, 3, 4);
    spec.train.activation_checkpointing = true;
    const auto recomputed = test::run_job(spec);
    for (std::size_t k = 0; k < 20; ++k) {
      INFO("step " << k + 1);
      CHECK(relative(kept[0].steps[k].loss, base[0].steps[k].loss) <= 1e-5);
      CHECK(relative(kept[0].steps[k].loss, recomputed[0].steps[k].loss) <= 1e-5);
      CHECK(relative(kept[0].steps[k].grad_norm, base[0].steps[k].grad_norm) <= 1e-4);
    }
    CHECK(kept[0].steps[19].loss < kept[0].steps[0].loss - 0.5);
    for (const auto* other : {&base, &recomputed}) {
      const auto gap = weight_difference(kept[0].weights, (*other)[0].weights);
      CAPTURE(gap.max_relative, gap.l2_relative);
      CHECK(gap.max_relative <= 1e-5);
      CHECK(gap.l2_relative <= 1e-5);
    }
    for (std::size_t r = 1; r < kept.size(); ++r) CHECK(kept[r].weights == kept[0].weights);
  }
}

namespace {

// A 3-step ZeRO-3 job of 4 layers on 2 ranks, and the bytes a rank holds of unit 0 and of one
// layer gathered.
struct gathered_job {
  static constexpr int layers = 4;
  config::job_spec spec;
  std::int64_t unit0 = 0, layer = 0;
  explicit gathered_job(const std::string& data) : spec(deep_job(data, 2, 3, layers)) {
    spec.train.max_steps = 3;
    const auto shape = core::train::shape_of(
        core::model::parse_config(nlohmann::json::parse(spec.model.inline_config_json), "test"));
    unit0 = test::gathered_unit_bytes(shape.outer_parameters, 2);
    layer = test::gathered_unit_bytes(shape.layer_parameters, 2);
  }
};

}  // namespace

TEST_CASE("ZeRO-3 frees each layer's gathered weights after its forward: a step never holds more "
          "than unit 0 and two layers", "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  gathered_job job(data);
  auto& spec = job.spec;
  const auto unit0 = job.unit0, layer = job.layer;
  // Unit 0 for the whole step, the layer in use and the next one prefetched (forward) or the one
  // below (backward). Kept whole until its backward, every layer would be gathered by the end of
  // the forward: unit 0 + 4 layers.
  for (bool checkpointing : {false, true}) {
    INFO((checkpointing ? "with" : "without") << " activation checkpointing");
    spec.train.activation_checkpointing = checkpointing;
    const auto out = test::run_job(spec);
    for (const auto& rank : out) {
      REQUIRE(rank.gathered_peaks.size() == 3);
      for (auto peak : rank.gathered_peaks) CHECK(peak == unit0 + 2 * layer);
    }
  }
  spec.zero.stage = 2;  // whole weights, nothing gathered
  spec.train.activation_checkpointing = false;
  const auto whole = test::run_job(spec);
  for (auto peak : whole[0].gathered_peaks) CHECK(peak == 0);
}

TEST_CASE(
    "ZeRO-3 keeps the last zero.layers_kept_gathered layers gathered from their forward to "
    "their backward: the same weights, and the step's peak holds those layers",
    "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  gathered_job job(data);
  auto& spec = job.spec;
  const int layers = gathered_job::layers;
  for (bool checkpointing : {false, true}) {
    INFO((checkpointing ? "with" : "without") << " activation checkpointing");
    spec.train.activation_checkpointing = checkpointing;
    spec.zero.layers_kept_gathered = 1;
    const auto one = test::run_job(spec);
    // k kept: by the backward's start the k layers and the one below them, prefetched; all kept,
    // every layer and nothing more.
    for (int k : {2, layers}) {
      INFO(k << " layers kept");
      spec.zero.layers_kept_gathered = k;
      const auto out = test::run_job(spec);
      for (std::size_t r = 0; r < out.size(); ++r) {
        CHECK(out[r].weights == one[r].weights);
        REQUIRE(out[r].steps.size() == one[r].steps.size());
        for (std::size_t i = 0; i < out[r].steps.size(); ++i)
          CHECK(out[r].steps[i].loss == one[r].steps[i].loss);
        REQUIRE(out[r].gathered_peaks.size() == 3);
        for (auto peak : out[r].gathered_peaks)
          CHECK(peak == job.unit0 + std::min(k + 1, layers) * job.layer);
      }
    }
  }
}

TEST_CASE("the fused compute path trains as the plain one at stage 0 and under ZeRO-3 with and "
          "without recomputation, and keeps the real vocabulary in the weights", "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));  // vocabulary 300, padded to 320
  const auto base = test::run_job(deep_job(data, 2, 0, 3));     // CPU: automatic is plain
  REQUIRE(base[0].steps.size() == 20);
  struct variant {
    int stage;
    bool checkpointing;
    std::int64_t chunk;  // loss_chunk_tokens
  };
  for (const auto v : {variant{0, false, 2048}, variant{3, false, 7}, variant{3, true, 0}}) {
    INFO("stage " << v.stage << (v.checkpointing ? " with" : " without")
                  << " recomputation, loss chunk " << v.chunk);
    auto spec = deep_job(data, 2, v.stage, 3);
    spec.train.path = config::compute_path::fused;
    spec.train.loss_chunk_tokens = v.chunk;
    spec.train.activation_checkpointing = v.checkpointing;
    const auto fused = test::run_job(spec);
    REQUIRE(fused[0].steps.size() == 20);
    for (std::size_t k = 0; k < 20; ++k) {
      INFO("step " << k + 1);
      CHECK(relative(fused[0].steps[k].loss, base[0].steps[k].loss) <= 1e-5);
      CHECK(relative(fused[0].steps[k].grad_norm, base[0].steps[k].grad_norm) <= 1e-4);
    }
    // Same weights, and as many: the padded vocabulary's rows exist only inside the head's GEMM.
    REQUIRE(fused[0].weights.size() == base[0].weights.size());
    const auto gap = weight_difference(fused[0].weights, base[0].weights);
    CAPTURE(gap.max_relative, gap.l2_relative);
    CHECK(gap.max_relative <= 1e-5);
    CHECK(gap.l2_relative <= 1e-5);
    for (std::size_t r = 1; r < fused.size(); ++r) CHECK(fused[r].weights == fused[0].weights);
  }
}

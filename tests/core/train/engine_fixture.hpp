// Shared set-up of the engine tests: a tiny job spec on tiny_data.hpp's data set and model, and a
// helper that runs a job on W ranks as threads (Gloo, or NCCL on GPUs, through an in-process store)
// and returns each rank's losses and final weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"
#include "core/comm/memory_store.hpp"
#include "core/train/causal_lm_engine.hpp"
#include "tests/core/comm/rank_threads.hpp"
#include "tests/support/shared_data.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/core/train/tiny_data.hpp"

namespace cohort::test {

// |a - b| relative to |b|.
inline double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

// A 20-step job with global batch 8 (micro-batches of 2).
inline config::job_spec tiny_job(const std::string& data_dir, int world_size, int stage, bool offload) {
  config::job_spec s;
  s.name = "tiny";
  s.workload = config::workload_kind::causal_lm;
  s.model.inline_config_json = tiny_llama_config();
  s.model.init_seed = 7;
  s.data.train = data_dir;
  s.scaling.num_workers = world_size;
  s.train.seq_len = 16;
  s.train.micro_batch_size = 2;
  s.train.grad_accum = 4 / world_size;
  s.train.max_steps = 20;
  s.train.lr = 1e-2;
  s.train.warmup_steps = 3;
  s.train.schedule = config::lr_schedule::cosine;
  s.train.min_lr_ratio = 0.1;
  s.train.weight_decay = 0.01;
  s.train.grad_clip = 1.0;
  s.train.seed = 3;
  s.zero.stage = stage;
  s.zero.offload_optimizer = offload ? config::offload_device::cpu : config::offload_device::none;
  return s;
}

// `spec` fine-tuning LoRA adapters (rank r, `alpha`, on `targets`) on the tiny-llama fixture of
// $COHORT_SHARED (hidden 64, 2 layers, vocab 512, fp32) instead of its own model.
inline config::job_spec with_lora(config::job_spec spec, std::vector<std::string> targets, int r = 4,
                                  double alpha = 8) {
  spec.model = {};
  spec.model.hf_dir = shared_file("fixtures/hf/tiny-llama");
  spec.model.lora.enabled = true;
  spec.model.lora.r = r;
  spec.model.lora.alpha = alpha;
  spec.model.lora.target_modules = std::move(targets);
  return spec;
}

// `spec` with `layers` decoder layers in its inline model config.
inline config::job_spec with_layers(config::job_spec spec, int layers) {
  auto config = nlohmann::json::parse(spec.model.inline_config_json);
  config["num_hidden_layers"] = layers;
  spec.model.inline_config_json = config.dump();
  return spec;
}

// Bytes of a unit of `elements` weights gathered in `element_size`-byte elements on `world`
// ranks: every rank's padded shard.
inline std::int64_t gathered_unit_bytes(std::int64_t elements, int world, std::int64_t element_size = 4) {
  return element_size * world * ((elements + world - 1) / world);
}

struct run_output {
  std::vector<core::train::step_result> steps;
  std::vector<float> weights;
  std::vector<std::int64_t> gathered_peaks;  // engine.gathered_peak_bytes() after each step
  bool graphed = false;                      // engine.step_graphed() after the last step
  std::string graph_status;                  // engine.step_graph_status() after the last step
};

// Runs body(engine) on an engine of `spec` on each of spec.scaling.num_workers ranks (with
// scaling.use_gpu: NCCL, rank r on GPU r % devices, as a worker would): each rank's value; throws
// the first rank's error.
template <typename R>
std::vector<R> run_engines(const config::job_spec& spec,
                           const std::function<R(core::train::causal_lm_engine&)>& body) {
  const int world = spec.scaling.num_workers;
  auto store = std::make_shared<core::comm::memory_store>();
  const auto prefix = unique_prefix("engine");
  auto results = run_ranks<R>(world, [&](int rank) {
    auto options = gloo_options(store, rank, world, prefix);
    if (spec.scaling.use_gpu) {
      options.backend = core::comm::backend_kind::nccl;
      options.cuda_device = core::train::causal_lm_engine::cuda_device_for(rank);
    }
    auto group = core::comm::make_process_group(options);
    core::train::causal_lm_engine engine(spec, *group);
    return body(engine);
  });
  return values_of(results);
}

// Runs `spec` to its end (run_engines).
inline std::vector<run_output> run_job(const config::job_spec& spec) {
  return run_engines<run_output>(spec, [](core::train::causal_lm_engine& engine) {
    run_output out;
    while (engine.steps_done() < engine.total_steps()) {
      out.steps.push_back(engine.train_step());
      out.gathered_peaks.push_back(engine.gathered_peak_bytes());
    }
    out.graphed = engine.step_graphed();
    out.graph_status = engine.step_graph_status();
    out.weights = engine.full_weights();
    return out;
  });
}

}  // namespace cohort::test

// Shared set-up of the engine tests: a tiny SFT-style data set (byte ids, loss mask off on each
// sample's first tokens), a tiny Llama config and a helper that runs a job on W ranks as threads
// (Gloo through an in-process store) and returns each rank's losses and final weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/job_spec.hpp"
#include "core/comm/memory_store.hpp"
#include "core/data/shard_writer.hpp"
#include "core/train/causal_lm_engine.hpp"
#include "tests/core/comm/rank_threads.hpp"
#include "tests/core/data/temp_dir.hpp"

namespace cohort::test {

// 96 samples of 6..16 ids in [3, 259) from a fixed generator; mask 0 on the first 3 tokens.
inline std::string make_tiny_dataset(const std::string& dir, std::int64_t vocab = 300) {
  core::data::prepare_output_dir(dir);
  core::data::shard_writer_options o;
  o.vocab_size = vocab;
  o.loss_mask = true;
  core::data::shard_writer w(dir, o);
  std::uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::int64_t>(state >> 33);
  };
  for (int i = 0; i < 96; ++i) {
    const std::int64_t n = 6 + next() % 11;
    std::vector<std::int32_t> ids;
    std::vector<std::uint8_t> mask;
    for (std::int64_t t = 0; t < n; ++t) {
      // A learnable pattern: mostly the previous id + 1, sometimes random.
      const std::int64_t id = (t > 0 && next() % 4 != 0) ? 3 + (ids.back() - 3 + 1) % 256 : 3 + next() % 256;
      ids.push_back(static_cast<std::int32_t>(id));
      mask.push_back(t >= 3 ? 1 : 0);
    }
    w.append(ids.data(), n, mask.data());
  }
  core::data::manifest m;
  m.kind = "sft";
  m.layout = "pad";
  m.seq_len = 16;
  m.pad_id = 0;
  m.eos_id = 2;
  m.vocab_size = vocab;
  w.finish(m);
  return dir;
}

inline std::string tiny_llama_config(std::int64_t vocab = 300) {
  return R"({"model_type": "llama", "vocab_size": )" + std::to_string(vocab) +
         R"(, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
            "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": false,
            "pad_token_id": 0})";
}

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

struct run_output {
  std::vector<core::train::step_result> steps;
  std::vector<float> weights;
};

// Runs `spec` on spec.scaling.num_workers ranks; throws the first rank's error.
inline std::vector<run_output> run_job(const config::job_spec& spec) {
  const int world = spec.scaling.num_workers;
  auto store = std::make_shared<core::comm::memory_store>();
  const auto prefix = unique_prefix("engine");
  auto results = run_ranks<run_output>(world, [&](int rank) {
    auto group = core::comm::make_process_group(gloo_options(store, rank, world, prefix));
    core::train::causal_lm_engine engine(spec, *group);
    run_output out;
    while (engine.steps_done() < engine.total_steps()) out.steps.push_back(engine.train_step());
    out.weights = engine.full_weights();
    return out;
  });
  std::vector<run_output> outputs;
  for (auto& r : results) {
    if (r.error) throw std::runtime_error("rank failed: " + r.error_text());
    outputs.push_back(std::move(*r.value));
  }
  return outputs;
}

}  // namespace cohort::test

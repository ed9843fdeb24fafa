// Per-rank memory estimates: ZeRO stages shard what they say, offload moves the optimizer to the
// host, and the parameter count comes from the model config.
#include <catch2/catch.hpp>

#include <fstream>

#include "core/train/memory_estimate.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort;
using core::train::estimate_memory;
using core::train::model_shape;

namespace {

config::job_spec gpu_job(int stage, int workers) {
  config::job_spec s;
  s.scaling.num_workers = workers;
  s.scaling.use_gpu = true;
  s.zero.stage = stage;
  s.train.dtype = config::precision::bf16;
  s.train.seq_len = 1024;
  s.train.micro_batch_size = 2;
  return s;
}

const model_shape one_billion{1'000'000'000, 2048, 22, 32, 32000};

}  // namespace

TEST_CASE("each ZeRO stage shards more of the training state", "[core][train]") {
  double last = 1e300;
  for (int stage = 0; stage <= 3; ++stage) {
    auto e = estimate_memory(gpu_job(stage, 8), one_billion);
    CHECK(e.per_rank.device_bytes < last);
    last = e.per_rank.device_bytes;
  }
  auto s0 = estimate_memory(gpu_job(0, 8), one_billion).per_rank;
  CHECK(s0.optimizer == Approx(8e9));
  CHECK(s0.master == Approx(4e9));
  auto s3 = estimate_memory(gpu_job(3, 8), one_billion).per_rank;
  CHECK(s3.optimizer == Approx(1e9));
  CHECK(s3.weights == Approx(2e9 / 8));
}

TEST_CASE("optimizer offload moves master weights and moments to host RAM", "[core][train]") {
  auto job = gpu_job(2, 4);
  auto on_gpu = estimate_memory(job, one_billion).per_rank;
  job.zero.offload_optimizer = config::offload_device::cpu;
  auto offloaded = estimate_memory(job, one_billion).per_rank;
  CHECK(offloaded.host_bytes == Approx(on_gpu.master + on_gpu.optimizer));
  CHECK(offloaded.device_bytes == Approx(on_gpu.device_bytes - offloaded.host_bytes));
  CHECK(estimate_memory(job, one_billion).rank0_consolidation_bytes == Approx(4e9));
}

TEST_CASE("the model shape is read from an inline config", "[core][train]") {
  config::model_spec m;
  m.inline_config_json = R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 16,
      "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
      "num_key_value_heads": 2, "max_position_embeddings": 64, "tie_word_embeddings": false})";
  auto shape = core::train::read_model_shape(m);
  // embed 100·16, per layer q,k,v,o 4·16·16 + mlp 3·16·32 + 2 norms 2·16, final norm, lm_head.
  const std::int64_t per_layer = 4 * 16 * 16 + 3 * 16 * 32 + 2 * 16;
  CHECK(shape.parameters == 100 * 16 + 2 * per_layer + 16 + 100 * 16);
  CHECK(shape.num_layers == 2);
}

// The causal_lm workload as a worker runs it: make_workload, rendezvous through a TCP store
// server, rank 0's metrics.jsonl and reports, cancellation.
#include "core/ckpt/layout.hpp"
#include "core/train/causal_lm_engine.hpp"
#include "core/train/mfu.hpp"
#include "tests/core/train/engine_fixture.hpp"
#include "tests/core/train/workload_runs.hpp"

#include "tests/support/catch_torch.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

using namespace cohort;
using cohort::test::temp_dir;

TEST_CASE("the causal_lm workload trains on two ranks and rank 0 writes metrics.jsonl every log step",
          "[core][train]") {
  temp_dir tmp;
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 2, false);
  spec.train.max_steps = 6;
  spec.train.log_every = 2;
  const auto unix_seconds = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  const double started = unix_seconds();
  const auto results = test::run_workload(spec, tmp.path("run"));
  const double ended = unix_seconds();
  for (const auto& r : results) REQUIRE(r.error_text() == "");
  // Steps 2, 4, 6, then step 6 again once its checkpoint (the final one) is committed.
  REQUIRE(results[0].value->reports.size() == 4);
  CHECK(results[0].value->reports[2].step == 6);
  CHECK(results[0].value->reports[2].total_steps == 6);
  CHECK(results[0].value->reports[2].checkpoint_step == 0);
  CHECK(results[0].value->reports[3].step == 6);
  CHECK(results[0].value->reports[3].checkpoint_step == 6);

  const auto lines = test::metrics_lines(tmp.path("run"));
  REQUIRE(lines.size() == 3);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    CHECK(lines[i]["step"] == 2 * (i + 1));
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s"}) {
      INFO(key);
      REQUIRE(lines[i].contains(key));
    }
    CHECK(lines[i]["loss"].get<double>() == Approx(results[0].value->reports[i].loss));
    CHECK(lines[i]["tokens_per_s"].get<double>() > 0);
    // When the line was written: within the run, in order (the lines' spacing is the wall time).
    REQUIRE(lines[i].contains("time"));
    CHECK(lines[i]["time"].get<double>() >= started);
    CHECK(lines[i]["time"].get<double>() <= ended);
    if (i > 0) CHECK(lines[i]["time"].get<double>() >= lines[i - 1]["time"].get<double>());
  }
}

TEST_CASE("a job started again after its final checkpoint reports its last step and loss, not 0",
          "[core][train]") {
  temp_dir tmp;
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 2, false);
  spec.train.max_steps = 4;
  const auto first = test::run_workload(spec, tmp.path("run"));
  REQUIRE(first[0].error_text() == "");
  const auto& last = first[0].value->reports.back();
  REQUIRE(last.step == 4);
  test::run_options second_attempt;
  second_attempt.attempt = 1;
  const auto again = test::run_workload(spec, tmp.path("run"), second_attempt);  // nothing left to run
  for (const auto& r : again) REQUIRE(r.error_text() == "");
  REQUIRE(again[0].value->reports.size() == 1);
  const auto& resumed = again[0].value->reports[0];
  CHECK(resumed.step == 4);
  CHECK(resumed.total_steps == 4);
  CHECK(resumed.checkpoint_step == 4);
  CHECK(resumed.loss == Approx(last.loss));
  CHECK(resumed.loss > 0);
}

TEST_CASE("train.as_test runs one step with the full run's learning rate, then the final "
          "checkpoint and the export", "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  auto full = test::tiny_job(data, 2, 2, false);
  full.train.max_steps = 6;
  full.train.warmup_steps = 0;
  full.train.schedule = config::lr_schedule::cosine;
  const auto straight = test::run_workload(full, tmp.path("full"));
  REQUIRE(straight[0].error_text() == "");
  auto smoke = full;
  smoke.train.as_test = true;
  const auto results = test::run_workload(smoke, tmp.path("smoke"));
  for (const auto& r : results) REQUIRE(r.error_text() == "");
  const auto& reports = results[0].value->reports;
  REQUIRE(!reports.empty());
  CHECK(reports.back().step == 1);
  CHECK(reports.back().total_steps == 1);
  CHECK(reports.back().checkpoint_step == 1);  // the final checkpoint is committed
  CHECK(reports.front().loss == straight[0].value->reports.front().loss);
  CHECK(reports.front().lr == straight[0].value->reports.front().lr);  // the schedule spans 6 steps
  CHECK(test::metrics_lines(tmp.path("smoke")).size() == 1);
  CHECK(std::filesystem::exists(core::ckpt::step_dir(tmp.path("smoke"), 1) + "/COMMITTED"));
  CHECK(std::filesystem::exists(tmp.path("smoke") + "/model/model.safetensors"));
  CHECK(test::contains_line(results[0].value->log, "train.as_test", "then the final checkpoint and export"));
}

TEST_CASE("a cancelled causal_lm workload stops with cancelled_error", "[core][train]") {
  temp_dir tmp;
  const auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 0, false);
  std::atomic<bool> cancelled{true};
  test::run_options options;
  options.cancelled = &cancelled;
  const auto results = test::run_workload(spec, tmp.path("run"), options);
  for (const auto& r : results) {
    REQUIRE(r.error);
    CHECK_THROWS_AS(std::rethrow_exception(r.error), core::train::cancelled_error);
  }
}

TEST_CASE("a data set that is not one, or lost a shard, fails every rank at setup with "
          "bad_input_error naming data.train",
          "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  REQUIRE(std::filesystem::remove(data + "/shard-00000.tokens"));
  for (const std::string& dir : {data, tmp.path("not-data")}) {
    INFO(dir);
    std::filesystem::create_directories(dir);
    const auto results = test::run_workload(test::tiny_job(dir, 2, 0, false), tmp.path("run"));
    for (const auto& r : results) {
      REQUIRE(r.error);
      CHECK_THROWS_AS(std::rethrow_exception(r.error), core::train::bad_input_error);
      CHECK_THAT(r.error_text(), Catch::StartsWith("data.train: "));
    }
  }
}

TEST_CASE("on two GPUs rank 0's metrics.jsonl carries the MFU against the card's bf16 peak",
          "[core][train][.gpu]") {
  if (core::train::causal_lm_engine::cuda_device_for(1) != 1)
    FAIL("this test needs 2 CUDA devices; this machine has fewer");
  temp_dir tmp;
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 3, false);
  spec.scaling.use_gpu = true;
  spec.train.dtype = config::precision::bf16;
  spec.train.max_steps = 4;
  const auto results = test::run_workload(spec, tmp.path("run"));
  for (const auto& r : results) REQUIRE(r.error_text() == "");
  const double peak = core::train::peak_bf16_flops(core::train::cuda_device_name(0));
  INFO("device 0: '" << core::train::cuda_device_name(0) << "', bf16 peak " << peak);
  std::ifstream in(tmp.path("run") + "/metrics.jsonl");
  REQUIRE(in);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    const auto j = nlohmann::json::parse(line);
    if (peak == 0) {
      CHECK_FALSE(j.contains("mfu"));  // an unknown card: no MFU rather than a wrong one
      continue;
    }
    REQUIRE(j.contains("mfu"));
    const double tokens_per_s = j["tokens_per_s"].get<double>();
    CHECK(j["mfu"].get<double>() > 0);
    CHECK(j["mfu"].get<double>() < 1);
    // tiny_llama_config: N = 37,792 parameters, L = 2, d = 32; T = train.seq_len = 16.
    CHECK(j["mfu"].get<double>() * 2 * peak / tokens_per_s == Approx(6.0 * 37'792 + 12.0 * 2 * 32 * 16));
  }
  CHECK(lines == 4);
}

namespace {

void xor_bytes(const std::string& path, std::uint64_t first, std::uint64_t count, std::uint64_t stride) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  for (std::uint64_t i = 0; i < count; ++i) {
    const auto at = static_cast<std::streamoff>(first + i * stride);
    f.seekg(at);
    char c;
    f.get(c);
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x01));
  }
  REQUIRE(f.good());
}

}  // namespace

TEST_CASE("a job on a data set with flipped bytes fails before its first step, naming the shard file",
          "[core][train]") {
  temp_dir tmp;
  const auto data_dir = test::make_tiny_dataset(tmp.path("data"));
  // 64 flipped low bytes of uint16 ids: every id stays in the vocabulary, only the checksum sees it.
  xor_bytes(data_dir + "/shard-00000.tokens", 0, 64, 2);
  auto spec = test::tiny_job(data_dir, 2, 2, false);
  spec.train.log_every = 1;
  const auto results = test::run_workload(spec, tmp.path("run"));
  for (const auto& r : results) {
    REQUIRE(r.error);
    CHECK_THAT(r.error_text(), Catch::Contains(data_dir + "/shard-00000.tokens") &&
                                   Catch::Contains("checksum mismatch") && Catch::Contains("expects xxh64"));
    if (r.value) CHECK(r.value->reports.empty());
  }
}

TEST_CASE("with data.verify false the check is skipped, and an id outside the vocabulary fails the step "
          "that reads it, naming the file and the offset",
          "[core][train]") {
  temp_dir tmp;
  const auto data_dir = test::make_tiny_dataset(tmp.path("data"));
  {
    std::fstream f(data_dir + "/shard-00000.tokens", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);  // id 4 (of sample 0) becomes 1000, little-endian uint16
    f.put(static_cast<char>(0xE8)).put(static_cast<char>(0x03));
    REQUIRE(f.good());
  }
  auto spec = test::tiny_job(data_dir, 1, 0, false);
  spec.train.max_steps = 12;  // one epoch: every sample is read once
  CHECK_THROWS_WITH(test::run_job(spec), Catch::Contains("checksum mismatch"));
  spec.data.verify = false;
  CHECK_THROWS_WITH(test::run_job(spec), Catch::Contains(data_dir + "/shard-00000.tokens") &&
                                             Catch::Contains("token offset 4 (byte offset 8") &&
                                             Catch::Contains("vocab_size 300"));
}

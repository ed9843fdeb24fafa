// causal_lm runs against S3 (a real s3rver on 127.0.0.1): with run.storage_path in S3 the ranks,
// each with a local directory of its own, checkpoint there, and a run stopped and started again
// resumes from S3 bitwise equal to a straight run, its final export uploaded too; with data.train
// in S3 a run streams its shards and trains exactly as from local disk.
#include "tests/core/train/engine_fixture.hpp"
#include "tests/core/train/workload_runs.hpp"

#include "tests/support/catch_torch.hpp"

#include <cstdlib>
#include <filesystem>

#include "core/ckpt/layout.hpp"
#include "core/ckpt/s3_checkpoints.hpp"
#include "tests/support/s3_server.hpp"

using namespace cohort;
using cohort::test::temp_dir;

TEST_CASE("a run checkpointing to S3, stopped and started again, resumes from S3 bitwise equal to a straight run",
          "[core][train][ckpt][s3]") {
  COHORT_NEED_S3_SERVER();
  test::s3_server server;
  test::s3_environment credentials;
  temp_dir tmp;
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 1, false);
  spec.train.max_steps = 12;
  spec.run.checkpoint.every_steps = 4;
  spec.run.checkpoint.num_to_keep = 2;
  for (const auto& r : test::run_workload(spec, tmp.path("straight"))) REQUIRE(r.error_text() == "");

  spec.run.storage_path = "s3://" + server.bucket() + "/runs";
  spec.run.s3_endpoint = server.endpoint();
  test::run_options o;
  o.remote_run = spec.run.storage_path + "/" + spec.name;
  const core::storage::s3_client client(server.config());
  const core::ckpt::s3_run run{&client, core::storage::parse_s3_url(o.remote_run, "test")};

  std::atomic<bool> cancelled{false};
  o.cancelled = &cancelled;
  o.on_report = [&](const core::train::step_report& r) {
    if (r.step == 6) cancelled = true;  // step 4 committed, steps 5-6 lost
  };
  for (const auto& r : test::run_workload(spec, tmp.path("local"), o)) REQUIRE(r.error);
  auto listed = core::ckpt::scan_checkpoints_s3(run);
  REQUIRE(!listed.empty());
  CHECK(listed.front().step == 4);
  CHECK(listed.front().committed);
  // Each rank uploaded its files and kept no local copy of them.
  for (int rank = 0; rank < 2; ++rank) {
    const auto local = core::ckpt::step_dir(tmp.path("local/node-" + std::to_string(rank)), 4);
    CHECK_FALSE(std::filesystem::exists(local + "/" + core::ckpt::rank_shard_name(rank)));
  }

  test::run_options again;
  again.attempt = 1;
  again.remote_run = o.remote_run;
  const auto results = test::run_workload(spec, tmp.path("local"), again);
  for (const auto& r : results) REQUIRE(r.error_text() == "");
  CHECK(test::contains_line(results[0].value->log, "resuming from", o.remote_run + "/checkpoints/step-00000004"));
  CHECK(results[0].value->reports.front().step == 5);

  std::vector<std::uint64_t> steps;
  for (const auto& c : core::ckpt::scan_checkpoints_s3(run)) {
    CHECK(c.committed);
    steps.push_back(c.step);
  }
  // num_to_keep 2, applied in S3: the newest, and the one this attempt resumed from (protected).
  CHECK(steps == std::vector<std::uint64_t>{4, 12});

  temp_dir cache;
  const auto latest = core::ckpt::latest_valid_s3(run, cache.str());
  REQUIRE(latest.checkpoint);
  REQUIRE(latest.checkpoint->step == 12);
  const auto straight = test::checkpoint_tensors(core::ckpt::step_dir(tmp.path("straight"), 12));
  const auto resumed = test::checkpoint_tensors(latest.checkpoint->path);
  REQUIRE(straight.size() == 3 * 21);
  for (const auto& [name, bytes] : straight) {
    INFO(name);
    CHECK(resumed.at(name) == bytes);
  }
  // The final export went up beside the checkpoints, and equals the straight run's.
  const auto exported = client.get_object(server.bucket(), run.url.key("model/model.safetensors"));
  CHECK(exported == test::read_file(tmp.path("straight/model/model.safetensors")));
}

TEST_CASE("a run whose data.train is in S3 streams it through its cache and trains exactly as from local disk",
          "[core][train][data][s3]") {
  COHORT_NEED_S3_SERVER();
  test::s3_server server;
  test::s3_environment credentials;
  temp_dir tmp;
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 1, false);
  spec.train.max_steps = 4;
  spec.train.log_every = 1;
  const auto local = test::run_workload(spec, tmp.path("local-data"));
  for (const auto& r : local) REQUIRE(r.error_text() == "");

  const core::storage::s3_client client(server.config());
  for (const auto& f : std::filesystem::directory_iterator(tmp.path("data")))
    client.put_object(server.bucket(), "sets/tiny/" + f.path().filename().string(), test::read_file(f.path()));
  spec.data.train = "s3://" + server.bucket() + "/sets/tiny";
  spec.data.cache_dir = tmp.path("data-cache");
  spec.run.s3_endpoint = server.endpoint();
  const auto streamed = test::run_workload(spec, tmp.path("s3-data"));
  for (const auto& r : streamed) REQUIRE(r.error_text() == "");

  const auto a = test::metrics_lines(tmp.path("local-data"));
  const auto b = test::metrics_lines(tmp.path("s3-data"));
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == a.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(b[i]["loss"] == a[i]["loss"]);
  // Each rank fetched into a cache of its own.
  CHECK(std::filesystem::exists(tmp.path("data-cache/rank-0")));
  CHECK(std::filesystem::exists(tmp.path("data-cache/rank-1")));
}

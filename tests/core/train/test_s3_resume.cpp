// causal_lm runs against S3 (a real s3rver on 127.0.0.1): with run.storage_path in S3 the ranks,
// each with a local directory of its own, checkpoint there, and a run stopped and started again
// resumes from S3 bitwise equal to a straight run (each rank but rank 0 downloading only its own
// files), its final export uploaded too; with data.train
// in S3 a run streams its shards and trains exactly as from local disk; with model.hf_dir in S3
// the ranks read their slices of the weights by range and train exactly as from local disk.
#include "tests/core/train/engine_fixture.hpp"
#include "tests/core/train/workload_runs.hpp"

#include "tests/support/catch_torch.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "core/ckpt/layout.hpp"
#include "core/ckpt/s3_checkpoints.hpp"
#include "core/train/memory_estimate.hpp"
#include "tests/support/s3_fault_proxy.hpp"
#include "tests/support/s3_server.hpp"
#include "tests/support/scoped_env.hpp"

using namespace cohort;
using cohort::test::temp_dir;

namespace {

// The run of `spec` kept in the test server's bucket: run.storage_path and its endpoint set; the
// options give run_workload the run's S3 prefix.
test::run_options in_s3(config::job_spec& spec, const test::s3_server& server) {
  spec.run.storage_path = "s3://" + server.bucket() + "/runs";
  spec.run.s3_endpoint = server.endpoint();
  test::run_options o;
  o.remote_run = spec.run.storage_path + "/" + spec.name;
  return o;
}

// The test server with its credentials in the environment, a temp dir, and the tiny job of two
// workers on a data set in it.
struct tiny_job_beside_server {
  test::s3_server server;
  test::s3_environment credentials;
  temp_dir tmp;
  config::job_spec spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 1, false);
};

}  // namespace

TEST_CASE("a run checkpointing to S3, stopped and started again, resumes from S3 bitwise equal to a straight run",
          "[core][train][ckpt][s3]") {
  COHORT_NEED_S3_SERVER();
  tiny_job_beside_server rig;
  const auto& server = rig.server;
  const auto& tmp = rig.tmp;
  auto& spec = rig.spec;
  spec.train.max_steps = 12;
  spec.run.checkpoint.every_steps = 4;
  spec.run.checkpoint.num_to_keep = 2;
  for (const auto& r : test::run_workload(spec, tmp.path("straight"))) REQUIRE(r.error_text() == "");

  test::run_options o = in_s3(spec, server);
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
  // Rank 0 downloaded the whole of step 4 to verify it; rank 1, resuming with the step's world
  // size, only its own files, with the manifest and COMMITTED.
  const auto cached = [&](int rank) {
    const std::string r = std::to_string(rank);
    std::vector<std::string> names;
    for (const auto& f : std::filesystem::directory_iterator(
             core::ckpt::step_dir(tmp.path("local/node-" + r + "/s3-cache/rank-" + r), 4)))
      names.push_back(f.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  CHECK(cached(0).size() == 6);
  CHECK(cached(1) == std::vector<std::string>{core::ckpt::committed_name, core::ckpt::manifest_name,
                                              core::ckpt::rank_state_name(1),
                                              core::ckpt::rank_shard_name(1)});

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
  tiny_job_beside_server rig;
  const auto& server = rig.server;
  const auto& tmp = rig.tmp;
  auto& spec = rig.spec;
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

namespace {

// The data section of a safetensors file's bytes: their size less the 8-byte length and the header.
std::uint64_t data_section_size(const std::string& bytes) {
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[i]);
  return bytes.size() - 8 - header;
}
std::uint64_t data_section_bytes(const std::string& path) { return data_section_size(test::read_file(path)); }

}  // namespace

TEST_CASE(
    "a run whose model.hf_dir is in S3 fetches each weight once, by range, and trains exactly as from disk",
    "[core][train][model][s3]") {
  COHORT_NEED_S3_SERVER();
  test::s3_server server;
  test::s3_fault_proxy proxy{server.port()};
  test::s3_environment credentials;
  temp_dir tmp;
  std::filesystem::create_directories(tmp.path("tmp"));
  const test::scoped_env tmpdir("TMPDIR", tmp.path("tmp"));  // where the ranks copy the model's small files
  const std::string fixture = test::shared_file("fixtures/hf/tiny-llama");
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 3, false);
  spec.model = {};
  spec.model.hf_dir = fixture;
  spec.train.max_steps = 4;
  spec.train.log_every = 1;
  for (const auto& r : test::run_workload(spec, tmp.path("local-model"))) REQUIRE(r.error_text() == "");

  const core::storage::s3_client client(server.config());
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors"})
    client.put_object(server.bucket(), std::string("models/tiny-llama/") + name,
                      test::read_file(fixture + "/" + name));
  spec.model.hf_dir = "s3://" + server.bucket() + "/models/tiny-llama";
  spec.run.s3_endpoint = proxy.endpoint();
  // The head's plan reads config.json alone, and sees the same model.
  CHECK(core::train::read_model_shape(spec.model, spec.run.s3_endpoint).parameters ==
        core::train::read_model_shape(test::with_lora(spec, {}).model).parameters);
  proxy.clear();
  proxy.fail_next(1, "/models/tiny-llama/model.safetensors HTTP/");  // one transient 500 on the way
  for (const auto& r : test::run_workload(spec, tmp.path("s3-model"))) REQUIRE(r.error_text() == "");
  CHECK(proxy.failures_served() == 1);

  const auto a = test::metrics_lines(tmp.path("local-model"));
  const auto b = test::metrics_lines(tmp.path("s3-model"));
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == a.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(b[i]["loss"] == a[i]["loss"]);
  CHECK(test::read_file(tmp.path("s3-model/model/model.safetensors")) ==
        test::read_file(tmp.path("local-model/model/model.safetensors")));
  // The export carries the model directory's generation config, copied from S3.
  CHECK(test::read_file(tmp.path("s3-model/model/generation_config.json")) ==
        test::read_file(fixture + "/generation_config.json"));

  // Each rank fetched the header, then only its ZeRO-3 shards: between them every byte of the
  // data section once, nothing whole.
  std::uint64_t data_bytes = 0;
  int headers = 0;
  for (const auto& e : proxy.exchanges()) {
    if (e.request_line.find("model.safetensors HTTP/") == std::string::npos) continue;
    INFO(e.request_line << " " << e.range);
    REQUIRE(e.status == 206);
    if (e.range == "bytes=0-7" || e.range.rfind("bytes=8-", 0) == 0)
      ++headers;
    else
      data_bytes += e.body_bytes;
  }
  CHECK(headers == 2 * 2);
  CHECK(data_bytes == data_section_bytes(fixture + "/model.safetensors"));
}

TEST_CASE(
    "a run in S3 counts each rank's upload in its save's bytes, and the step's download, the export's "
    "write and its upload in rank 0's export, so that a long transfer is progress to the hang detector",
    "[core][train][ckpt][s3]") {
  COHORT_NEED_S3_SERVER();
  tiny_job_beside_server rig;
  const auto& server = rig.server;
  const auto& tmp = rig.tmp;
  auto& spec = rig.spec;
  spec.train.max_steps = 2;
  test::run_options o = in_s3(spec, server);
  core::train::rank_activity activities[2];
  o.activities = activities;
  for (const auto& r : test::run_workload(spec, tmp.path("local"), o)) REQUIRE(r.error_text() == "");

  const core::storage::s3_client client(server.config());
  const auto url = core::storage::parse_s3_url(o.remote_run, "test");
  const auto bytes_under = [&](const std::string& prefix) {
    std::uint64_t n = 0;
    for (const auto& obj : client.list_objects(server.bucket(), prefix)) n += obj.size;
    return n;
  };
  const std::string step = url.key("checkpoints/" + core::ckpt::step_dir_name(2)) + "/";
  // Rank 1's final save: its shard's tensors written, then its two files uploaded.
  const auto one = activities[1].read();
  const std::uint64_t tensors =
      data_section_size(client.get_object(server.bucket(), step + core::ckpt::rank_shard_name(1)));
  CHECK(one.step == 2);
  CHECK(one.bytes_total == tensors + bytes_under(step + core::ckpt::rank_shard_name(1)) +
                               bytes_under(step + core::ckpt::rank_state_name(1)));
  CHECK(one.bytes_done == one.bytes_total);
  // Rank 0 exported after its save: the step downloaded, the model written, then uploaded.
  const auto zero = activities[0].read();
  CHECK(zero.step == 2);
  CHECK(zero.bytes_total > bytes_under(step) + bytes_under(url.key("model") + "/"));
  CHECK(zero.bytes_done == zero.bytes_total);
}

// Checkpoints of the causal_lm workload: a run stopped after a checkpoint and started again
// continues exactly (bitwise on the same world size, 1e-6 on another), async saves equal sync
// ones, damaged checkpoints are refused by name, retention and run.resume.
#include "tests/core/train/engine_fixture.hpp"
#include "tests/core/train/rank_checks.hpp"
#include "tests/core/train/workload_runs.hpp"

#include "tests/support/catch_torch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "core/ckpt/layout.hpp"
#include "core/ckpt/replica.hpp"
#include "core/comm/comm_error.hpp"
#include "core/comm/tcp_store.hpp"
#include "core/comm/tcp_store_wire.hpp"
#include "core/train/checkpoint_request.hpp"
#include "core/train/test_hooks.hpp"
#include "tests/support/scoped_env.hpp"

using namespace cohort;
using cohort::test::temp_dir;

using cohort::test::require_ok;
using cohort::test::run_until;

namespace {

constexpr std::int64_t total_steps = 12;

config::job_spec resumable_job(const std::string& data, int world, int stage) {
  auto spec = test::tiny_job(data, world, stage, false);
  spec.train.max_steps = total_steps;
  spec.run.checkpoint.every_steps = 4;
  return spec;
}

std::vector<double> losses(const std::string& run_dir) {
  std::vector<double> out;
  for (const auto& line : test::metrics_lines(run_dir)) {
    REQUIRE(line["step"] == static_cast<std::int64_t>(out.size()) + 1);
    out.push_back(line["loss"].get<double>());
  }
  return out;
}

// Returns once run_dir holds the committed checkpoint of `step` (the caller checks), or after two
// minutes.
void wait_committed(const std::string& run_dir, std::uint64_t step) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& c : core::ckpt::list_checkpoints(run_dir))
      if (c.step == step) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string final_checkpoint(const std::string& run_dir) {
  return core::ckpt::step_dir(run_dir, total_steps);
}

// ||a - b|| / ||a|| over two fp32 tensors' bytes.
double relative_difference(const std::string& a, const std::string& b) {
  REQUIRE(a.size() == b.size());
  const auto* x = reinterpret_cast<const float*>(a.data());
  const auto* y = reinterpret_cast<const float*>(b.data());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size() / sizeof(float); ++i) {
    diff += (double{x[i]} - y[i]) * (double{x[i]} - y[i]);
    norm += double{x[i]} * x[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// The resumed run's losses and final checkpoint tensors against the straight run's, within
// 1e-6 relative (losses one by one, tensors by norm).
void check_close_runs(const std::string& straight_dir, const std::string& resumed_dir) {
  const auto a = losses(straight_dir), b = losses(resumed_dir);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) <= 1e-6 * std::abs(a[i]));
  const auto straight = test::checkpoint_tensors(final_checkpoint(straight_dir));
  const auto resumed = test::checkpoint_tensors(final_checkpoint(resumed_dir));
  for (const auto& [name, bytes] : straight) {
    INFO(name);
    CHECK(relative_difference(bytes, resumed.at(name)) <= 1e-6);
  }
}

// Runs `spec` straight into tmp/straight, and into tmp/resumed stopped after step 6 (step 4
// committed, steps 5-6 lost) and started again; checks that the two have the same losses and
// final checkpoints, bit for bit. Returns how many tensors the checkpoints hold.
std::size_t check_resumed_bitwise(const config::job_spec& spec, temp_dir& tmp) {
  require_ok(test::run_workload(spec, tmp.path("straight")));
  run_until(spec, tmp.path("resumed"), 6);
  REQUIRE(core::ckpt::list_checkpoints(tmp.path("resumed")).back().step == 4);
  test::run_options again;
  again.attempt = 1;
  require_ok(test::run_workload(spec, tmp.path("resumed"), again));
  CHECK(losses(tmp.path("resumed")) == losses(tmp.path("straight")));
  const auto compared = test::compare_checkpoints(final_checkpoint(tmp.path("straight")),
                                                  final_checkpoint(tmp.path("resumed")));
  CHECK(compared.differing.empty());
  return compared.tensors.size();
}

// Plays the attacker of issue 13: sets `key` through the store's old, unauthenticated protocol
// and returns what the server answered before it closed the connection.
std::string unauthenticated_set(std::uint16_t port, const std::string& key) {
  namespace wire = core::comm::wire;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  std::string p;
  wire::put_u8(p, static_cast<std::uint8_t>(wire::op::set));
  wire::put_str(p, key);
  wire::put_str(p, "1");
  const std::string f = wire::frame(p);
  REQUIRE(::send(fd, f.data(), f.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(f.size()));
  std::string got;
  for (;;) {  // until the server hangs up
    pollfd pfd{fd, POLLIN, 0};
    REQUIRE(::poll(&pfd, 1, 5000) == 1);
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return got;
}

}  // namespace

TEST_CASE("a running attempt's store refuses clients without its secret and the run goes on unchanged",
          "[core][train][ckpt][security]") {
  temp_dir tmp;
  auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 1);
  spec.train.max_steps = 6;
  spec.train.log_every = 1;
  spec.run.checkpoint.every_steps = 0;  // only at the end, and when requested
  // The key rank 0 waits on for rank 1's report of the final checkpoint: a forged one would
  // corrupt the commit.
  const std::string report_key = core::train::checkpoint_key_prefix("job-1", 0) + "step-00000006/rank-1";
  std::uint64_t refused = 0;
  std::string wrong_secret_error;
  test::run_options o;
  o.on_report_store = [&](core::comm::tcp_store_server& server, const std::string&,
                          const core::train::step_report& r) {
    if (r.step == 1) {  // the attack: eight writes without the secret, one with a wrong one
      for (int i = 0; i < 8; ++i)
        CHECK(unauthenticated_set(server.port(), report_key).size() <= 4 + core::comm::wire::hello_bytes);
      try {
        core::comm::tcp_store forged("127.0.0.1", server.port(), core::comm::make_store_secret(), std::chrono::seconds(5));
        forged.set(report_key, "{}");
      } catch (const core::comm::comm_error& e) {
        wrong_secret_error = e.what();
      }
      refused = server.refused_count();
    }
  };
  require_ok(test::run_workload(spec, tmp.path("run"), o));
  CHECK(refused == 9);
  CHECK_THAT(wrong_secret_error, Catch::Contains("refused this client's proof"));
  std::vector<std::uint64_t> steps;
  for (const auto& c : core::ckpt::list_checkpoints(tmp.path("run"))) steps.push_back(c.step);
  CHECK(steps == std::vector<std::uint64_t>{6});
}

TEST_CASE("a checkpoint requested through the run's signals is saved by every rank after the next step",
          "[core][train][ckpt]") {
  temp_dir tmp;
  auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 1);
  spec.train.max_steps = 6;
  spec.train.log_every = 1;
  spec.run.checkpoint.every_steps = 0;  // only at the end, and when requested
  core::train::run_signals signals;
  test::run_options o;
  o.signals = &signals;
  // Rank 0 reports step 3 on its own thread before it looks for requests again: the request is
  // taken before step 4, whatever the machine's load. Two requests before one step make one save.
  o.on_report_store = [&](core::comm::tcp_store_server&, const std::string&, const core::train::step_report& r) {
    if (r.step == 3) signals.checkpoint_requests += 2;  // rank 0's thread only
  };
  const auto results = test::run_workload(spec, tmp.path("run"), o);
  require_ok(results);
  CHECK(test::contains_line(results[0].value->log, "checkpoint requested", "after step 4"));
  std::vector<std::uint64_t> steps;
  for (const auto& c : core::ckpt::list_checkpoints(tmp.path("run"))) steps.push_back(c.step);
  CHECK(steps == std::vector<std::uint64_t>{4, 6});  // the request and the end, no more
}

TEST_CASE("a preempted run saves after the next step on every rank and runs no further step",
          "[core][train][ckpt]") {
  temp_dir tmp;
  auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 1);
  spec.train.max_steps = 8;
  spec.train.log_every = 1;
  spec.run.checkpoint.every_steps = 0;
  core::train::run_signals signals;
  test::run_options o;
  o.signals = &signals;
  std::int64_t last_step = 0;
  o.on_report_store = [&](core::comm::tcp_store_server&, const std::string&, const core::train::step_report& r) {
    last_step = std::max(last_step, r.step);  // rank 0's thread only
    if (r.step == 2 && r.checkpoint_step == 0) {  // as the command link applies a preemption
      signals.preempted = true;
      ++signals.checkpoint_requests;
    }
    if (r.checkpoint_step == 3) signals.cancelled = true;  // the emergency checkpoint committed: stop
  };
  const auto results = test::run_workload(spec, tmp.path("run"), o);
  for (const auto& r : results) {
    REQUIRE(r.error);
    REQUIRE_THROWS_AS(std::rethrow_exception(r.error), core::train::cancelled_error);
  }
  CHECK(last_step == 3);
  std::vector<std::uint64_t> steps;
  for (const auto& c : core::ckpt::list_checkpoints(tmp.path("run"))) steps.push_back(c.step);
  CHECK(steps == std::vector<std::uint64_t>{3});
}

TEST_CASE("a run stopped after a checkpoint and started again ends bitwise equal to a straight run",
          "[core][train][ckpt]") {
  const int stage = GENERATE(0, 3);
  INFO("ZeRO stage " << stage);
  temp_dir tmp;
  const auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, stage);
  require_ok(test::run_workload(spec, tmp.path("straight")));

  run_until(spec, tmp.path("resumed"), 6);  // step 4 committed, steps 5-6 lost
  REQUIRE(core::ckpt::list_checkpoints(tmp.path("resumed")).back().step == 4);
  test::run_options again;
  again.attempt = 1;
  const auto results = test::run_workload(spec, tmp.path("resumed"), again);
  require_ok(results);
  CHECK(test::contains_line(results[0].value->log, "resuming from", "step-00000004"));
  CHECK(results[0].value->reports.front().step == 5);

  CHECK(losses(tmp.path("resumed")) == losses(tmp.path("straight")));
  const auto compared = test::compare_checkpoints(final_checkpoint(tmp.path("straight")),
                                                  final_checkpoint(tmp.path("resumed")));
  CHECK(compared.differing.empty());
  CHECK(compared.tensors.size() == 3 * 21);  // param, exp_avg, exp_avg_sq of the tiny Llama's 21 weights
}

TEST_CASE(
    "a run with the delayed parameter update stopped after a checkpoint and started again ends bitwise "
    "equal to a straight run, and the delay changes its losses",
    "[core][train][ckpt]") {
  temp_dir tmp;
  auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 3);
  spec.zero.offload_optimizer = spec.zero.offload_param = config::offload_device::cpu;
  require_ok(test::run_workload(spec, tmp.path("on time")));
  spec.zero.delayed_param_update = true;
  check_resumed_bitwise(spec, tmp);
  // The warmup's 3 updates are on time, the 4th (after step 4) is delayed but the step-4
  // checkpoint ends its delay: steps 1-5 compute on the same weights as without the delay; step
  // 6 on those of 4 updates instead of 5.
  REQUIRE(spec.train.warmup_steps == 3);
  const auto on_time = losses(tmp.path("on time")), delayed = losses(tmp.path("straight"));
  REQUIRE(delayed.size() == on_time.size());
  for (std::size_t k = 0; k < 5; ++k) CHECK(delayed[k] == on_time[k]);
  CHECK(delayed[5] != on_time[5]);
}

TEST_CASE("a LoRA run stopped after a checkpoint and started again ends bitwise equal to a straight run",
          "[core][train][ckpt][lora]") {
  const int stage = GENERATE(0, 3);
  INFO("ZeRO stage " << stage);
  temp_dir tmp;
  const auto spec =
      test::with_lora(resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, stage), {"q_proj", "v_proj", "down_proj"});
  CHECK(check_resumed_bitwise(spec, tmp) == 3 * 2 * 3 * 2);  // param and moments of A and B, 3 maps, 2 layers
}

TEST_CASE("a run of 2 workers resumed on 4 with the same global batch continues within 1e-6",
          "[core][train][ckpt]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  // On 4, grad_accum 1 instead of 2: the same global batch.
  test::run_straight_and_resumed_by(resumable_job(data, 2, 2), resumable_job(data, 4, 2), tmp.path("straight"),
                                    tmp.path("resumed"), 5);

  CHECK(core::ckpt::read_manifest(final_checkpoint(tmp.path("resumed"))).world_size == 4);
  check_close_runs(tmp.path("straight"), tmp.path("resumed"));
}

TEST_CASE("a job with another global batch refuses to resume, naming the fields", "[core][train][ckpt]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  run_until(resumable_job(data, 2, 1), tmp.path("run"), 5);
  auto bigger = resumable_job(data, 2, 1);
  bigger.train.grad_accum = 4;
  const auto results = test::run_workload(bigger, tmp.path("run"));
  REQUIRE(results[0].error);
  CHECK_THAT(results[0].error_text(), Catch::Contains("global batch of 8") && Catch::Contains("train.grad_accum"));
}

TEST_CASE("async checkpoints hold the same state as synchronous ones", "[core][train][ckpt]") {
  temp_dir tmp;
  auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 3);
  require_ok(test::run_workload(spec, tmp.path("sync")));
  spec.run.checkpoint.async = true;
  require_ok(test::run_workload(spec, tmp.path("async")));
  for (std::int64_t step : {4, 8, 12}) {
    INFO("step " << step);
    CHECK(test::checkpoint_tensors(core::ckpt::step_dir(tmp.path("async"), step)) ==
          test::checkpoint_tensors(core::ckpt::step_dir(tmp.path("sync"), step)));
  }
}

TEST_CASE("a damaged newest checkpoint is refused by name and the run resumes from the one before",
          "[core][train][ckpt]") {
  const std::string damage = GENERATE("no COMMITTED", "truncated shard", "flipped byte");
  INFO(damage);
  temp_dir tmp;
  auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 2);
  spec.train.max_steps = 8;
  require_ok(test::run_workload(spec, tmp.path("run")));
  const auto newest = core::ckpt::step_dir(tmp.path("run"), 8);
  const std::string shard = newest + "/" + core::ckpt::rank_shard_name(1);
  if (damage == "no COMMITTED") {
    REQUIRE(::unlink((newest + "/" + core::ckpt::committed_name).c_str()) == 0);
  } else if (damage == "truncated shard") {
    struct stat st {};
    REQUIRE(::stat(shard.c_str(), &st) == 0);
    REQUIRE(::truncate(shard.c_str(), st.st_size / 2) == 0);
  } else {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 0x10);
    f.seekp(-5, std::ios::end);
    f.put(c);
  }

  spec.train.max_steps = total_steps;
  const auto results = test::run_workload(spec, tmp.path("run"));
  require_ok(results);
  const auto& log = results[0].value->log;
  CHECK(test::contains_line(log, "step-00000008", damage == "no COMMITTED" ? "skipped" : "rejected"));
  CHECK(test::contains_line(log, "resuming from", "step-00000004"));
  CHECK(results[0].value->reports.front().step == 5);
  CHECK(core::ckpt::list_checkpoints(tmp.path("run")).back().step == total_steps);
  CHECK(core::ckpt::verify_checkpoint(newest).ok());  // step 8 written again
}

TEST_CASE("retention keeps exactly num_to_keep committed checkpoints, the newest among them",
          "[core][train][ckpt]") {
  temp_dir tmp;
  auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 1);
  spec.run.checkpoint.every_steps = 2;
  spec.run.checkpoint.num_to_keep = 2;
  spec.run.checkpoint.async = true;
  require_ok(test::run_workload(spec, tmp.path("run")));
  std::vector<std::uint64_t> kept;
  for (const auto& c : core::ckpt::scan_checkpoints(tmp.path("run"))) kept.push_back(c.step);
  CHECK(kept == std::vector<std::uint64_t>{10, 12});
}

TEST_CASE(
    "with run.checkpoint.final false a run ends after its last step with its metrics and the "
    "checkpoints every_steps names, neither a final checkpoint nor an export",
    "[core][train][ckpt]") {
  temp_dir tmp;
  auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 1);
  spec.run.checkpoint.every_steps = 5;  // steps 5 and 10; the last, 12, is not a multiple
  spec.run.checkpoint.final = false;
  require_ok(test::run_workload(spec, tmp.path("run")));
  CHECK(losses(tmp.path("run")).size() == static_cast<std::size_t>(total_steps));
  std::vector<std::uint64_t> saved;
  for (const auto& c : core::ckpt::scan_checkpoints(tmp.path("run"))) saved.push_back(c.step);
  CHECK(saved == std::vector<std::uint64_t>{5, 10});
  CHECK_FALSE(std::filesystem::exists(final_checkpoint(tmp.path("run"))));
  CHECK_FALSE(std::filesystem::exists(tmp.path("run") + "/model"));
}

TEST_CASE("run.resume false refuses a run directory that holds committed checkpoints",
          "[core][train][ckpt]") {
  temp_dir tmp;
  auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 0);
  spec.train.max_steps = 4;
  require_ok(test::run_workload(spec, tmp.path("run")));
  spec.run.resume = false;
  const auto results = test::run_workload(spec, tmp.path("run"));
  for (const auto& r : results) {
    REQUIRE(r.error);
    CHECK_THAT(r.error_text(), Catch::Contains("run.resume is false") && Catch::Contains("step-00000004"));
  }
}

TEST_CASE("on two GPUs a run stopped after a checkpoint and started again continues where it stopped",
          "[core][train][ckpt][.gpu]") {
  if (core::train::causal_lm_engine::cuda_device_for(1) != 1)
    FAIL("this test needs 2 CUDA devices; this machine has fewer");
  const int stage = GENERATE(1, 3);
  INFO("ZeRO stage " << stage);
  temp_dir tmp;
  auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, stage);
  spec.scaling.use_gpu = true;
  require_ok(test::run_workload(spec, tmp.path("straight")));
  run_until(spec, tmp.path("resumed"), 6);
  test::run_options again;
  again.attempt = 1;
  require_ok(test::run_workload(spec, tmp.path("resumed"), again));

  check_close_runs(tmp.path("straight"), tmp.path("resumed"));
  const auto straight = test::checkpoint_tensors(final_checkpoint(tmp.path("straight")));
  const auto resumed = test::checkpoint_tensors(final_checkpoint(tmp.path("resumed")));
  int identical = 0;
  for (const auto& [name, bytes] : straight) identical += bytes == resumed.at(name) ? 1 : 0;
  WARN(identical << " of " << straight.size() << " checkpoint tensors bitwise identical");
}

TEST_CASE("a checkpoint resumes under another ZeRO stage or offload setting", "[core][train][ckpt]") {
  const auto [stage, offload] = GENERATE(std::make_pair(0, false), std::make_pair(3, false), std::make_pair(2, true));
  INFO("resumed with ZeRO stage " << stage << (offload ? " and CPU offload" : ""));
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  const auto first = resumable_job(data, 2, 1);
  require_ok(test::run_workload(first, tmp.path("straight")));
  run_until(first, tmp.path("resumed"), 5);
  auto other = resumable_job(data, 2, stage);
  other.zero.offload_optimizer = offload ? config::offload_device::cpu : config::offload_device::none;
  require_ok(test::run_workload(other, tmp.path("resumed")));

  check_close_runs(tmp.path("straight"), tmp.path("resumed"));
}

namespace {

// What node "node-<rank>" keeps of the run in `run_dir` under the replica root `root`.
std::string node_memory(const std::string& root, int rank, const std::string& run_dir) {
  return core::ckpt::replica_dir(root, "node-" + std::to_string(rank), "job-1", run_dir);
}

// `spec` with peer replicas, run into `run_dir` by ranks on nodes of their own and killed after
// step 6 (step 4 committed, its replicas on both nodes); then `lose` takes away what the case
// says, and the run restarts: the restart's results, every rank ok.
std::vector<cohort::test::rank_result<test::rank_run>> restarted_with_replicas(
    config::job_spec spec, const std::string& run_dir, const std::function<void()>& lose) {
  spec.run.checkpoint.replicate = true;
  test::run_options nodes;
  nodes.node_per_rank = true;
  run_until(spec, run_dir, 6, nodes);
  REQUIRE(core::ckpt::list_checkpoints(run_dir).back().step == 4);
  lose();
  nodes.attempt = 1;
  auto results = test::run_workload(spec, run_dir, nodes);
  require_ok(results);
  return results;
}

}  // namespace

TEST_CASE(
    "a restart from the peers' memory reads no checkpoint file from storage and ends bitwise equal "
    "to a restart from storage",
    "[core][train][ckpt]") {
  temp_dir tmp;
  const test::scoped_env memory("COHORT_REPLICA_DIR", tmp.path("memory"));
  const auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 1);
  run_until(spec, tmp.path("storage"), 6);
  test::run_options again;
  again.attempt = 1;
  require_ok(test::run_workload(spec, tmp.path("storage"), again));

  const std::string peer = tmp.path("peer");
  const auto results = restarted_with_replicas(spec, peer, [&] {
    // Node 1 lost with its memory: the restarted rank 1 takes its shard from node 0's copy.
    std::filesystem::remove_all(node_memory(tmp.path("memory"), 1, peer));
    // The shards in storage emptied: a restore that read them would fail.
    for (int r = 0; r < 2; ++r)
      std::filesystem::resize_file(core::ckpt::step_dir(peer, 4) + "/" + core::ckpt::rank_shard_name(r), 0);
  });
  CHECK(test::contains_line(results[0].value->log, "resuming from", "from the nodes' memory"));
  CHECK(test::contains_line(results[0].value->log, "restoring step 4 from its node's memory",
                            ": 0 bytes of checkpoint files read from storage"));
  CHECK(test::contains_line(results[1].value->log, "restoring step 4 from rank 0's copy",
                            ": 0 bytes of checkpoint files read from storage"));
  CHECK(results[0].value->reports.front().step == 5);
  CHECK(losses(peer) == losses(tmp.path("storage")));
  CHECK(test::compare_checkpoints(final_checkpoint(tmp.path("storage")), final_checkpoint(peer))
            .differing.empty());
  // The run ended: its replicas left the nodes' memory.
  CHECK(!std::filesystem::exists(node_memory(tmp.path("memory"), 0, peer)));
  CHECK(!std::filesystem::exists(node_memory(tmp.path("memory"), 1, peer)));
}

TEST_CASE(
    "a shard whose replica and copy are both gone, or whose replica is damaged, is restored from "
    "storage and the run still ends bitwise equal to a straight run",
    "[core][train][ckpt]") {
  temp_dir tmp;
  const std::string memory = tmp.path("memory"), run = tmp.path("resumed");
  const test::scoped_env root("COHORT_REPLICA_DIR", memory);
  const auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 1);
  require_ok(test::run_workload(spec, tmp.path("straight")));
  const auto step4 = [&](int node) {
    return core::ckpt::replica_step_dir(node_memory(memory, node, run), 4);
  };

  SECTION("both copies of rank 1's shard gone: every rank reads storage") {
    const auto results = restarted_with_replicas(spec, run, [&] {
      std::filesystem::remove_all(node_memory(memory, 1, run));
      std::filesystem::remove(step4(0) + "/" + core::ckpt::replica_record_name(1));
    });
    CHECK(test::contains_line(results[0].value->log,
                              "peer replicas not used: no node of this attempt holds a copy",
                              "for rank(s) 1; restoring from storage"));
    for (int r = 0; r < 2; ++r)
      CHECK(test::contains_line(results[r].value->log, "restoring step 4 from storage",
                                "bytes of checkpoint files read"));
  }
  SECTION("rank 0's replica damaged: rank 0 reads its own shard from storage, rank 1 its node's memory") {
    const auto results = restarted_with_replicas(spec, run, [&] {
      std::fstream f(step4(0) + "/" + core::ckpt::rank_shard_name(0),
                     std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-4, std::ios::end);
      f.write("\x01\x02\x03\x04", 4);
    });
    CHECK(test::contains_line(results[0].value->log, "its replica of step 4 cannot be used (damaged: ",
                              "restoring its shard from storage"));
    CHECK(test::contains_line(results[1].value->log, "restoring step 4 from its node's memory",
                              ": 0 bytes of checkpoint files read from storage"));
  }
  CHECK(losses(run) == losses(tmp.path("straight")));
  CHECK(test::compare_checkpoints(final_checkpoint(tmp.path("straight")), final_checkpoint(run))
            .differing.empty());
}

namespace {

// `spec` with peer replicas every `every` steps.
config::job_spec replicated_every(config::job_spec spec, int every) {
  spec.run.checkpoint.replicate = true;
  spec.run.checkpoint.replicate_every = every;
  return spec;
}

// The steps of the replicas node "node-<rank>" holds of the run in `run_dir`, one per record.
std::vector<std::uint64_t> held_steps(const std::string& root, int rank, const std::string& run_dir) {
  std::vector<std::uint64_t> steps;
  for (const auto& r : core::ckpt::scan_replicas(node_memory(root, rank, run_dir))) steps.push_back(r.step);
  return steps;
}

}  // namespace

TEST_CASE(
    "with run.checkpoint.replicate_every a restart resumes from the newest replica step, newer than "
    "the committed checkpoint, reads no checkpoint file from storage and ends bitwise equal to a run "
    "never killed",
    "[core][train][ckpt][replicas]") {
  temp_dir tmp;
  const std::string memory = tmp.path("memory"), run = tmp.path("resumed");
  const test::scoped_env root("COHORT_REPLICA_DIR", memory);
  const auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 1);
  require_ok(test::run_workload(spec, tmp.path("straight")));

  // Saves at steps 4, 8 and 12, replica steps at 5 and 10: killed after step 6, step 5 replicated.
  const auto replicated = replicated_every(spec, 5);
  test::run_options nodes;
  nodes.node_per_rank = true;
  run_until(replicated, run, 6, nodes);
  REQUIRE(core::ckpt::list_checkpoints(run).back().step == 4);
  CHECK(!std::filesystem::exists(core::ckpt::step_dir(run, 5)));  // nothing of step 5 in storage
  for (int node = 0; node < 2; ++node)  // own shard and the buddy's copy; step 4's gone once 5 was complete
    CHECK(held_steps(memory, node, run) == std::vector<std::uint64_t>{5, 5});
  // Node 1 lost with its memory: the restarted rank 1 takes its shard from node 0's copy. The
  // shards in storage emptied: a restore that read them would fail.
  std::filesystem::remove_all(node_memory(memory, 1, run));
  for (int r = 0; r < 2; ++r)
    std::filesystem::resize_file(core::ckpt::step_dir(run, 4) + "/" + core::ckpt::rank_shard_name(r), 0);
  nodes.attempt = 1;
  const auto results = test::run_workload(replicated, run, nodes);
  require_ok(results);

  CHECK(test::contains_line(
      results[0].value->log,
      "resuming from replica step 5 (run.checkpoint.replicate_every; the newest committed "
      "checkpoint, ",
      "/step-00000004) from the nodes' memory"));
  CHECK(test::contains_line(results[0].value->log, "restoring replica step 5 from its node's memory",
                            ": 0 bytes of checkpoint files read from storage"));
  CHECK(test::contains_line(results[1].value->log, "restoring replica step 5 from rank 0's copy",
                            ": 0 bytes of checkpoint files read from storage"));
  CHECK(test::contains_line(results[0].value->log, "step 10: replica kept in the nodes' memory", "blocked"));
  CHECK(results[0].value->reports.front().step == 6);
  CHECK(results[0].value->reports.front().checkpoint_step == 4);  // the newest committed, not the replica
  // metrics.jsonl: step 6 of the killed attempt dropped, logged again once (losses() checks the steps).
  CHECK(losses(run) == losses(tmp.path("straight")));
  CHECK(test::compare_checkpoints(final_checkpoint(tmp.path("straight")), final_checkpoint(run))
            .differing.empty());
  CHECK(!std::filesystem::exists(node_memory(memory, 0, run)));  // the run ended: replicas dropped
}

TEST_CASE(
    "a replica step not complete on every rank is not used: the restart resumes from the newest "
    "complete one, or the committed checkpoint, and ends bitwise equal to a run never killed",
    "[core][train][ckpt][replicas]") {
  temp_dir tmp;
  const std::string memory = tmp.path("memory"), pauses = tmp.path("pauses"), run = tmp.path("resumed");
  const test::scoped_env root("COHORT_REPLICA_DIR", memory);
  std::filesystem::create_directories(pauses);
  const test::scoped_env paused(core::train::test_pause_dir_variable, pauses);  // where pause points look
  auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 1);
  require_ok(test::run_workload(spec, tmp.path("straight")));
  test::run_options nodes;
  nodes.node_per_rank = true;

  SECTION("killed while rank 1 took step 6's replica: no checkpoint committed, step 4's replica restored") {
    spec.run.checkpoint.every_steps = 0;  // storage only at the end
    const auto replicated = replicated_every(spec, 2);
    // Rank 1 held with its copies of step 6 written, none recorded; then the attempt is killed.
    const std::string point = pauses + "/replica-step-00000006-rank-1-attempt-1";
    std::ofstream(point + ".arm").close();
    std::atomic<bool> cancelled{false}, ended{false};
    std::thread killer([&] {  // kills the attempt once rank 1 is there (or gives up once it ended)
      while (!ended && !std::filesystem::exists(point + ".paused"))
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      cancelled = true;
    });
    nodes.cancelled = &cancelled;
    const auto killed = test::run_workload(replicated, run, nodes);
    ended = true;
    killer.join();
    REQUIRE(std::filesystem::exists(point + ".paused"));
    for (const auto& r : killed) CHECK(r.error);
    std::filesystem::remove(point + ".arm");
    CHECK(core::ckpt::list_checkpoints(run).empty());
    for (int node = 0; node < 2; ++node)  // step 4 kept until step 6 is complete everywhere
      CHECK(held_steps(memory, node, run) == std::vector<std::uint64_t>{4, 4});

    nodes.cancelled = nullptr;
    nodes.attempt = 1;
    const auto results = test::run_workload(replicated, run, nodes);
    require_ok(results);
    CHECK(test::contains_line(results[0].value->log, "resuming from replica step 4",
                              "no committed checkpoint"));
    for (int r = 0; r < 2; ++r)
      CHECK(test::contains_line(results[r].value->log, "restoring replica step 4 from its node's memory",
                                ": 0 bytes of checkpoint files read from storage"));
    CHECK(results[0].value->reports.front().step == 5);
  }
  SECTION("rank 1's records of step 5 gone from both nodes: the committed step 4 is read from storage") {
    const auto replicated = replicated_every(spec, 5);
    run_until(replicated, run, 6, nodes);
    for (int node = 0; node < 2; ++node)
      std::filesystem::remove(core::ckpt::replica_step_dir(node_memory(memory, node, run), 5) + "/" +
                              core::ckpt::replica_record_name(1));
    nodes.attempt = 1;
    const auto results = test::run_workload(replicated, run, nodes);
    require_ok(results);
    CHECK(test::contains_line(results[0].value->log, "replica step 5 not used: no node of this attempt holds",
                              "for rank(s) 1"));
    for (int r = 0; r < 2; ++r)
      CHECK(test::contains_line(results[r].value->log, "restoring step 4 from storage",
                                "bytes of checkpoint files"));
  }
  SECTION(
      "rank 0's copy of step 5 damaged: every rank leaves the replica step for the committed checkpoint") {
    const auto replicated = replicated_every(spec, 5);
    run_until(replicated, run, 6, nodes);
    std::fstream f(
        core::ckpt::replica_step_dir(node_memory(memory, 0, run), 5) + "/" + core::ckpt::rank_shard_name(0),
        std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.write("\x01\x02\x03\x04", 4);
    f.close();
    nodes.attempt = 1;
    const auto results = test::run_workload(replicated, run, nodes);
    require_ok(results);
    CHECK(test::contains_line(results[0].value->log, "replica step 5 cannot be restored (rank 0: damaged: ",
                              "resuming from the committed checkpoints instead"));
    for (int r = 0; r < 2; ++r)
      CHECK(test::contains_line(results[r].value->log, "restoring step 4 from storage",
                                "bytes of checkpoint files"));
    CHECK(results[0].value->reports.front().step == 5);
  }
  CHECK(losses(run) == losses(tmp.path("straight")));
  CHECK(test::compare_checkpoints(final_checkpoint(tmp.path("straight")), final_checkpoint(run))
            .differing.empty());
}

TEST_CASE(
    "a checkpoint the disk cannot hold fails at once naming both sizes, writes nothing of it "
    "and leaves the newest committed checkpoint",
    "[core][train][ckpt]") {
  for (bool async : {false, true}) {
    INFO("async " << async);
    temp_dir tmp;
    auto spec = resumable_job(test::make_tiny_dataset(tmp.path("data")), 2, 1);
    spec.run.checkpoint.async = async;
    // Killed at step 5 once step 4's checkpoint is committed: an asynchronous one commits on a
    // thread of its own, on a loaded machine after step 5, and a kill abandons a commit in flight.
    std::atomic<bool> cancelled{false};
    test::run_options first;
    first.cancelled = &cancelled;
    first.on_report = [&](const core::train::step_report& r) {
      if (r.step != 5) return;
      wait_committed(tmp.path("run"), 4);
      cancelled = true;
    };
    test::run_workload(spec, tmp.path("run"), first);
    const auto committed = core::ckpt::list_checkpoints(tmp.path("run"));
    REQUIRE_FALSE(committed.empty());
    REQUIRE(committed.back().step == 4);
    // The run's file system seen with 1 byte free, for this scope.
    const test::scoped_env full(core::train::test_disk_free_variable, "1");
    test::run_options again;
    again.attempt = 1;
    for (const auto& r : test::run_workload(spec, tmp.path("run"), again)) {
      REQUIRE(r.error);
      CHECK_THAT(r.error_text(),
                 Catch::Contains("checkpoint of step 8: rank ") && Catch::Contains("'s shard needs ") &&
                     Catch::Contains("has 0.0 MiB free") && Catch::Contains("run.storage_path"));
    }
    CHECK(core::ckpt::list_checkpoints(tmp.path("run")).back().step == 4);
    CHECK_FALSE(std::filesystem::exists(core::ckpt::step_dir(tmp.path("run"), 8)));
  }
}

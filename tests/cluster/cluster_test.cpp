// The cluster over the network, as users run it: cluster-head, cluster-workers and submit as real
// processes on 127.0.0.1, with failures made the way they happen (kill -9).
#include <httplib.h>

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "actors/client_protocol.hpp"
#include "actors/worker_process_link.hpp"
#include "core/data/dataset.hpp"
#include "core/data/sample_audit.hpp"
#include "core/proc/cpu_binding.hpp"
#include "core/resources/gpu_discovery.hpp"
#include "core/store/cluster_store.hpp"
#include "core/store/leader_lease.hpp"
#include "tests/cluster/cluster_harness.hpp"
#include "tests/core/train/tiny_data.hpp"
#include "tests/support/etcd_cluster.hpp"
#include "tests/support/fake_metadata_server.hpp"
#include "tests/support/files.hpp"
#include "tests/support/json_lines.hpp"
#include "tests/support/tcp_listener.hpp"

using namespace std::chrono_literals;
using cohort::test::lr_job;
using cohort::test::test_cluster;
using json = nlohmann::json;

namespace {

// A job's events.jsonl once its last line is in `state`: the head's store writer appends after
// the head answers, so the file is read again until then (the test fails after `timeout`).
std::vector<json> events_ending_in(test_cluster& c, const std::string& id, const std::string& state,
                                   std::chrono::seconds timeout) {
  const auto path = c.store() + "/jobs/" + id + "/events.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto events = cohort::test::read_json_lines(path);
    if (!events.empty() && events.back()["state"] == state) return events;
    if (std::chrono::steady_clock::now() > deadline) {
      FAIL(path << " never ended in " << state << "; last: " << (events.empty() ? json() : events.back()).dump());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

bool is_terminal_state(const json& s) {
  return s["state"] == "SUCCEEDED" || s["state"] == "FAILED" || s["state"] == "STOPPED";
}

// Waits for job `id` to end SUCCEEDED after `attempts` attempts, `preemptions` of them
// preempted and none failed: its status.
json succeeded_unfailed(test_cluster& c, const std::string& id, int attempts, int preemptions) {
  const auto s = c.wait_for(
      id, [](const json& s) { return is_terminal_state(s); }, 180s);
  INFO(s.dump());
  REQUIRE(s["state"] == "SUCCEEDED");
  CHECK(s["attempts"] == attempts);
  CHECK(s["preemptions"] == preemptions);
  CHECK(s["failures"].empty());
  return s;
}

// The job's current attempt (1-based: `attempts`) waits before `step` (run.hold_before_step).
bool held_before(const json& s, int step, int attempt = 1) {
  return s["state"] == "RUNNING" && s["attempts"] == attempt && s["held_before_step"] == step;
}

// A spec with run.hold_before_step set: every attempt stops before `step` until released.
std::string holding(const std::string& spec_json, int step) {
  auto spec = json::parse(spec_json);
  spec["run"]["hold_before_step"] = step;
  return spec.dump();
}

// The job's attempt is held before `step` and its trainer was adopted by a head that restarted or
// took over (until then the reason says "head restarted" and a release would be refused).
bool held_and_adopted(const json& s, int step) {
  return held_before(s, step) && s["reason"].get<std::string>().rfind("head restarted", 0) != 0;
}

// `submit release JOB`, which must be accepted.
void release(test_cluster& c, const std::string& id) {
  auto r = c.submit({"release", id});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// The cluster most cases start from: a head and one node, "n1", with 2 CPUs. The case's body names
// it `c`, as it names a test_cluster of its own.
struct head_and_one_node {
  test_cluster c;
  head_and_one_node() {
    c.start_head();
    c.start_worker("n1", 2);
  }
};

// `submit run JOB` without following: the job's id.
std::string start_job(test_cluster& c, const std::string& job_file) {
  auto run = c.submit({"run", job_file});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  return first_line(run.out);
}

// `submit run --follow` of the job `job_text` (named `name`, kept under the test's runs/), which
// must end SUCCEEDED: the lines of its metrics.jsonl.
std::vector<json> followed_to_success(test_cluster& c, const std::string& job_text, const std::string& name) {
  const auto run = c.submit({"run", c.write_job(job_text), "--follow"});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK(c.status(first_line(run.out))["state"] == "SUCCEEDED");
  return cohort::test::read_json_lines(c.dir().path("runs/" + name + "/metrics.jsonl"));
}

// Waits for job `id` to fail on its own input, at its first attempt, not restarted: the reason.
std::string failed_on_its_input(test_cluster& c, const std::string& id) {
  const auto s = c.wait_for(id, [](const json& s) { return s["state"] == "FAILED"; }, 120s);
  INFO(s.dump());
  CHECK(s["attempts"] == 1);
  REQUIRE(s["failures"].size() == 1);
  CHECK(s["failures"][0]["kind"] == "bad_input");
  const auto reason = s["reason"].get<std::string>();
  CHECK_THAT(reason, Catch::StartsWith("bad input: worker rank "));
  return reason;
}

// A causal_lm job of 24 steps of a tiny Llama on 2 workers, restarted forever.
std::string tiny_llama_job(const std::string& name, const std::string& data, const std::string& storage,
                           int every_steps) {
  return R"({"name": ")" + name + R"(", "workload": "causal_lm",
    "model": {"config": )" + cohort::test::tiny_llama_config() + R"(, "init_seed": 7},
    "data": {"train": ")" + data + R"("},
    "scaling": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
    "train": {"seq_len": 16, "micro_batch_size": 2, "grad_accum": 2, "max_steps": 24, "lr": 0.01,
              "warmup_steps": 3, "schedule": "cosine", "seed": 3},
    "zero": {"stage": 2},
    "run": {"storage_path": ")" + storage + R"(", "failure": {"max_failures": -1},
            "checkpoint": {"every_steps": )" + std::to_string(every_steps) + "}}}";
}

}  // namespace

TEST_CASE("a three-worker job runs with rank 0 and the trainer on the large_cpu_mem node",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  c.start_worker("plain", 2);
  c.start_worker("bigmem", 2, R"({"large_cpu_mem": 1})");
  auto job = c.write_job(lr_job("tagged", 3, 20, 0.0, 0, c.dir().str() + "/runs",
                                R"(, "trainer_resources": {"large_cpu_mem": 0.01}, "placement_strategy": "SPREAD")"));
  auto run = c.submit({"run", job, "--follow"});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto id = first_line(run.out);
  CHECK(id.rfind("job-", 0) == 0);
  auto s = c.status(id);
  CHECK(s["state"] == "SUCCEEDED");
  CHECK(s["trainer_node"] == "bigmem");
  CHECK(s["rank_nodes"][0] == "bigmem");
  auto logs = c.submit({"logs", id});
  REQUIRE(logs.exit_code == 0);
  for (int rank = 0; rank < 3; ++rank)
    CHECK(logs.out.find("(worker rank=" + std::to_string(rank) + " node=") != std::string::npos);
  auto list = c.submit({"list", "--json"});
  REQUIRE(list.exit_code == 0);
  CHECK(json::parse(list.out)["jobs"].size() == 1);
  CHECK(json::parse(list.out)["nodes"].size() == 2);
}

// Sets this process's soft open-files limit for the daemons it starts next (they inherit it), and
// puts the old one back when it goes (a hard limit, once lowered, may not come back).
struct soft_open_files_for_children {
  rlimit old{};
  explicit soft_open_files_for_children(rlim_t soft) {
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &old) == 0);
    const rlimit lowered{soft, old.rlim_max};
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  }
  ~soft_open_files_for_children() { ::setrlimit(RLIMIT_NOFILE, &old); }
};

TEST_CASE(
    "cluster-head and cluster-worker raise their open-files limit to the hard limit and say so, "
    "their ranks inherit it, and a rank whose limit is below what its job's size needs says so "
    "in the job's log",
    "[cluster]") {
  rlimit now{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &now) == 0);
  if (now.rlim_max < 4096) {
    WARN("skipped: the hard open-files limit here is " << now.rlim_max << ", below 4096");
    return;
  }
  test_cluster c;
  const std::string hard = now.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(now.rlim_max);
  {
    soft_open_files_for_children lowered(300);
    c.start_head();
    c.start_worker("roomy", 2);
  }
  CHECK_THAT(c.head().wait_for_line("open files: ", 60s),
             Catch::Contains("cluster-head: open files: " + hard + " (raised from 300, the hard limit)"));
  // A node whose hard limit is 280 (prlimit sets it for that process alone): a rank of 5 needs
  // about 256 + 8 * 4 = 288.
  REQUIRE(::access("/usr/bin/prlimit", X_OK) == 0);  // util-linux, in every Debian
  cohort::test::running_process tight({"/usr/bin/prlimit", "--nofile=100:280", "--", c.program("cluster-worker"), "--address",
                                       c.address(), "--credentials", c.credentials(), "--name", "tight",
                                       "--num-cpus", "5"},
                                      {});
  CHECK_THAT(tight.wait_for_line("open files: ", 60s),
             Catch::Contains("cluster-worker: open files: 280 (raised from 100, the hard limit)"));
  // A job of `workers` ranks on node `node` alone, followed to its end: its log.
  const auto run_on = [&](const std::string& node, int workers) {
    const auto job = c.write_job(
        lr_job(node, workers, 3, 0.0, 0, c.dir().str() + "/runs", R"(, "nodes": [")" + node + R"("])"));
    const auto run = c.submit({"run", job, "--follow"});
    INFO(run.out << run.err);
    REQUIRE(run.exit_code == 0);
    return c.submit({"logs", first_line(run.out)}).out;
  };
  const auto roomy_logs = run_on("roomy", 2);
  CHECK_THAT(roomy_logs, Catch::Contains("; open files: " + hard + " (the hard limit)"));
  CHECK_THAT(roomy_logs, !Catch::Contains("the open-files limit is"));
  const auto tight_logs = run_on("tight", 5);
  CHECK_THAT(tight_logs, Catch::Contains("; open files: 280 (the hard limit)"));  // the node's, inherited
  CHECK_THAT(tight_logs,
             Catch::Contains("node tight: the open-files limit is 280, below the about 288 a rank "
                             "of a job of 5 ranks may hold open"));
}

TEST_CASE_METHOD(head_and_one_node, "kill -9 of a worker process restarts the group and the job succeeds", "[cluster]") {
  auto job = c.write_job(holding(lr_job("resilient", 2, 20, 0, -1, c.dir().str() + "/runs"), 4));
  auto id = start_job(c, job);
  c.wait_for(id, [](const json& s) { return held_before(s, 4); }, 60s);
  REQUIRE(::kill(c.worker_pid(id, 1, "n1"), SIGKILL) == 0);
  c.wait_for(id, [](const json& s) { return held_before(s, 4, 2); }, 120s);  // the restart holds too
  release(c, id);
  auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  CHECK(s["step"] == 20);
  CHECK(s["attempts"] == 2);
  REQUIRE(s["failures"].size() == 1);
  CHECK(s["failures"][0]["rank"] == 1);
  CHECK(s["failures"][0]["node"] == "n1");
  CHECK_THAT(s["failures"][0]["reason"].get<std::string>(), Catch::Contains("SIGKILL"));
}

TEST_CASE_METHOD(head_and_one_node, "with max_failures 0 a worker killed with kill -9 fails the job, naming rank, node and "
          "signal",
          "[cluster]") {
  auto job = c.write_job(holding(lr_job("fragile", 2, 10, 0, 0, c.dir().str() + "/runs"), 3));
  auto id = start_job(c, job);
  c.wait_for(id, [](const json& s) { return held_before(s, 3); }, 60s);
  REQUIRE(::kill(c.worker_pid(id, 0, "n1"), SIGKILL) == 0);
  auto s = c.wait_for(id, [](const json& s) { return s["state"] == "FAILED"; }, 60s);
  REQUIRE(s["failures"].size() == 1);
  CHECK(s["failures"][0]["rank"] == 0);
  CHECK(s["failures"][0]["node"] == "n1");
  CHECK_THAT(s["failures"][0]["reason"].get<std::string>(), Catch::Contains("signal 9"));
  auto text = c.submit({"status", id});
  CHECK_THAT(text.out, Catch::Contains("rank 0 on n1") && Catch::Contains("SIGKILL"));
}

TEST_CASE("kill -9 of a cluster-worker makes its job wait PENDING until a new node joins",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  c.start_worker("a", 2);
  auto job = c.write_job(holding(lr_job("elastic", 2, 10, 0, -1, c.dir().str() + "/runs"), 3));
  auto id = start_job(c, job);
  c.wait_for(id, [](const json& s) { return held_before(s, 3); }, 60s);
  c.kill_worker_process("a");
  auto pending = c.wait_for(id, [](const json& s) { return s["state"] == "PENDING"; }, 60s);
  CHECK_THAT(pending["reason"].get<std::string>(), Catch::Contains("no alive nodes"));
  CHECK(pending["held_before_step"] == 0);
  c.start_worker("b", 2);
  // An attempt may also fail on a's loss before it starts: the one on b is the one held.
  c.wait_for(id, [](const json& s) {
    return s["trainer_node"] == "b" && held_before(s, 3, s["attempts"].get<int>());
  }, 120s);
  release(c, id);
  auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  CHECK(s["trainer_node"] == "b");
  CHECK(s["attempts"].get<int>() >= 2);
}

TEST_CASE_METHOD(head_and_one_node, "a head killed with kill -9 and restarted on its store keeps the job, which finishes",
          "[cluster]") {
  auto job = c.write_job(holding(lr_job("survivor", 2, 10, 0, -1, c.dir().str() + "/runs"), 3));
  auto id = start_job(c, job);
  c.wait_for(id, [](const json& s) { return held_before(s, 3); }, 60s);
  c.kill_head();
  c.start_head();
  auto list = c.submit({"list", "--json"});
  REQUIRE(list.exit_code == 0);
  auto jobs = json::parse(list.out)["jobs"];
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0]["id"] == id);
  // The trainer, adopted, tells the new head where its ranks are: still held, same attempt.
  auto adopted = c.wait_for(id, [](const json& s) { return held_and_adopted(s, 3); }, 120s);
  CHECK(adopted["step"] == 2);
  release(c, id);
  auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  CHECK(s["step"] == 10);
  CHECK(s["attempts"] == 1);
  std::set<std::string> states;
  for (const auto& event : events_ending_in(c, id, "SUCCEEDED", 60s)) states.insert(event["state"]);
  CHECK(states.count("RUNNING") == 1);
  CHECK(states.count("SUCCEEDED") == 1);
}

TEST_CASE("clients without the cluster's credentials are refused", "[cluster]") {
  test_cluster c;
  c.start_head();
  SECTION("no credentials at all") {
    auto r = c.submit({"list"}, {{"COHORT_CREDENTIALS", ""}});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("credentials"));
  }
  SECTION("another cluster's credentials") {
    test_cluster other;
    other.start_head();
    auto r = c.submit({"list"}, {{"COHORT_CREDENTIALS", other.credentials()}});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("refused") || Catch::Contains("handshake") ||
                          Catch::Contains("no answer"));
  }
  auto ok = c.submit({"list", "--json"});
  CHECK(ok.exit_code == 0);
}

TEST_CASE("garbage, truncated and oversized bytes sent to the head's port do not stop it serving",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  const int port = std::stoi(c.address().substr(c.address().rfind(':') + 1));
  auto blast = [&](const std::string& bytes) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ::close(fd);
  };
  blast("this is not ZMTP at all\r\n\r\n");
  blast(std::string("\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f", 10));  // a truncated greeting
  blast(std::string(4 << 20, '\xab'));                                  // 4 MiB of noise
  auto r = c.submit({"list", "--json"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(json::parse(r.out)["jobs"].is_array());
}

TEST_CASE_METHOD(head_and_one_node, "kill -9 of a worker mid-run resumes from the last checkpoint and ends bitwise equal to a "
          "straight run",
          "[cluster][ckpt]") {
  const auto data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  const auto job = [&](const std::string& name) { return tiny_llama_job(name, data, c.dir().str() + "/runs", 6); };
  auto straight = c.submit({"run", c.write_job(job("straight")), "--follow"});
  INFO(straight.out << straight.err);
  REQUIRE(straight.exit_code == 0);

  // Held before step 7: step 6's checkpoint is committed (saves block), step 7 not yet begun.
  const auto id = start_job(c, c.write_job(holding(job("killed"), 7)));
  const std::string killed_dir = c.dir().str() + "/runs/killed";
  c.wait_for(id, [](const json& s) { return held_before(s, 7); }, 120s);
  REQUIRE(::access((killed_dir + "/checkpoints/step-00000006/COMMITTED").c_str(), F_OK) == 0);
  REQUIRE(::kill(c.worker_pid(id, 1, "n1"), SIGKILL) == 0);
  // The restart resumes from step 6 and holds before step 7 again.
  const auto resumed = c.wait_for(id, [](const json& s) { return held_before(s, 7, 2); }, 120s);
  CHECK(resumed["checkpoint_step"] == 6);
  release(c, id);
  auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  CHECK(s["attempts"] == 2);
  CHECK(s["checkpoint_step"] == 24);
  CHECK(c.submit({"logs", id}).out.find("resuming from") != std::string::npos);

  auto losses = [](const std::string& run_dir) {
    std::vector<double> out;
    for (const auto& j : cohort::test::read_json_lines(run_dir + "/metrics.jsonl")) {
      REQUIRE(j["step"] == static_cast<int>(out.size()) + 1);
      out.push_back(j["loss"].get<double>());
    }
    return out;
  };
  const std::string straight_dir = c.dir().str() + "/runs/straight";
  CHECK(losses(killed_dir).size() == 24);
  CHECK(losses(killed_dir) == losses(straight_dir));
  for (const char* shard : {"rank-00000.safetensors", "rank-00001.safetensors"}) {
    INFO(shard);
    CHECK(cohort::test::read_file(killed_dir + "/checkpoints/step-00000024/" + shard) ==
          cohort::test::read_file(straight_dir + "/checkpoints/step-00000024/" + shard));
  }
}

TEST_CASE_METHOD(head_and_one_node, "submit checkpoint makes a running job save a checkpoint after its next step", "[cluster][ckpt]") {
  const auto data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  const auto id =
      start_job(c, c.write_job(holding(tiny_llama_job("asked", data, c.dir().str() + "/runs", 0), 4)));
  c.wait_for(id, [](const json& s) { return held_before(s, 4); }, 120s);
  auto asked = c.submit({"checkpoint", id});
  INFO(asked.out << asked.err);
  REQUIRE(asked.exit_code == 0);
  CHECK_THAT(asked.out, Catch::Contains("checkpoint requested: job " + id));
  release(c, id);
  c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  // every_steps 0: only the requested checkpoint (after step 4, the next one) and the final one.
  std::vector<std::string> steps;
  for (const auto& e : std::filesystem::directory_iterator(c.dir().str() + "/runs/asked/checkpoints"))
    steps.push_back(e.path().filename().string());
  std::sort(steps.begin(), steps.end());
  CHECK(steps == std::vector<std::string>{"step-00000004", "step-00000024"});
  CHECK(::access((c.dir().str() + "/runs/asked/checkpoints/step-00000004/COMMITTED").c_str(), F_OK) == 0);
  CHECK_THAT(c.submit({"logs", id}).out, Catch::Contains("checkpoint requested: saving after step 4"));
  CHECK(c.submit({"checkpoint", id}).exit_code == 1);  // no longer running
}

TEST_CASE_METHOD(head_and_one_node, "a held job shows as held in submit status until released, and release and checkpoint "
          "refuse what a job cannot do, naming why",
          "[cluster]") {
  const auto id = start_job(c, c.write_job(holding(lr_job("paused", 2, 5, 0, 0, c.dir().str() + "/runs"), 2)));
  const auto held = c.wait_for(id, [](const json& s) { return held_before(s, 2); }, 60s);
  CHECK(held["step"] == 1);
  CHECK_THAT(c.submit({"status", id}).out,
             Catch::Contains("held before step 2 (run.hold_before_step): `submit release " + id + "`"));
  CHECK_THAT(c.submit({"logs", id}).out, Catch::Contains("held before step 2 (run.hold_before_step) in attempt 1"));
  const auto no_checkpoints = c.submit({"checkpoint", id});
  CHECK(no_checkpoints.exit_code == 1);
  CHECK_THAT(no_checkpoints.err, Catch::Contains("runs workload linear_regression, which saves no checkpoints"));
  const auto released = c.submit({"release", id});
  INFO(released.out << released.err);
  CHECK(released.exit_code == 0);
  CHECK_THAT(released.out, Catch::Contains("released: job " + id + " goes on with step 2"));
  const auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 60s);
  CHECK(s["step"] == 5);
  CHECK(s["held_before_step"] == 0);
  CHECK_THAT(c.submit({"logs", id}).out, Catch::Contains("released: running step 2"));
  const auto ended = c.submit({"release", id});
  CHECK(ended.exit_code == 1);
  CHECK_THAT(ended.err, Catch::Contains("is SUCCEEDED: only a RUNNING job can be released"));

  const auto free = start_job(c, c.write_job(lr_job("free", 2, 5, 0, 0, c.dir().str() + "/runs")));
  const auto no_hold = c.submit({"release", free});
  CHECK(no_hold.exit_code == 1);
  CHECK_THAT(no_hold.err, Catch::Contains("has no run.hold_before_step: there is no hold to release"));
  c.wait_for(free, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 60s);
}

// ---- GPUs and the job environment, through the real programs (this machine has no GPU) ----

namespace {

// A linear-regression job asking `gpus` GPUs per worker.
std::string gpu_lr_job(const std::string& name, double gpus, const std::string& storage) {
  auto spec = json::parse(lr_job(name, 1, 5, 0.0, 0, storage));
  spec["scaling"]["use_gpu"] = true;
  spec["scaling"]["resources_per_worker"]["GPU"] = gpus;
  return spec.dump();
}

}  // namespace

TEST_CASE_METHOD(head_and_one_node, "a job asking more GPUs than any node offers fails at once, naming the numbers",
          "[cluster]") {
  auto run = c.submit({"run", c.write_job(gpu_lr_job("too-many-gpus", 64, c.dir().str() + "/runs")),
                       "--follow"});
  INFO(run.out << run.err);
  CHECK(run.exit_code == 1);
  auto s = c.status(first_line(run.out));
  CHECK(s["state"] == "FAILED");
  CHECK(s["attempts"] == 0);
  const auto reason = s["reason"].get<std::string>();
  CHECK_THAT(reason, Catch::StartsWith("scaling.resources_per_worker.GPU 64 per worker: "));
  auto list = c.submit({"list", "--json"});
  REQUIRE(list.exit_code == 0);
  auto nodes = json::parse(list.out)["nodes"];
  REQUIRE(nodes.size() == 1);
  CHECK(nodes[0]["name"] == "n1");
  if (!cohort::core::resources::cuda_build()) {
    CHECK_THAT(reason, Catch::Contains(cohort::core::resources::no_cuda_text));
    CHECK(nodes[0]["gpus"] == 0);
    CHECK_THAT(nodes[0]["gpu_note"].get<std::string>(),
               Catch::StartsWith(cohort::core::resources::no_cuda_text));
    auto text = c.submit({"list"});
    CHECK_THAT(text.out, Catch::Contains("node n1 (127.0.0.1): no GPUs (this build of cohort"));
  }
}

TEST_CASE("cluster-worker --num-gpus beyond this machine's GPUs exits 2 naming both numbers",
          "[cluster]") {
  test_cluster c;
  auto r = c.run("cluster-worker", {"--name", "n1", "--num-gpus", "64"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("cluster-worker: --num-gpus 64: "));
  CHECK_THAT(r.err, Catch::Contains(cohort::core::resources::cuda_build()
                                        ? "this machine has"
                                        : cohort::core::resources::no_cuda_text));
}

TEST_CASE("submit --local refuses a GPU job this machine can never run", "[cluster]") {
  test_cluster c;
  auto r = c.submit({"--local", "run", c.write_job(gpu_lr_job("local-gpu", 1, c.dir().str() + "/runs"))});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("can never run on this local cluster"));
  if (!cohort::core::resources::cuda_build())
    CHECK_THAT(r.err, Catch::Contains(std::string("scaling.use_gpu: ") +
                                      cohort::core::resources::no_cuda_text));
}

TEST_CASE("submit --local refuses a job held at a step, which nothing could release", "[cluster]") {
  test_cluster c;
  const auto job = c.write_job(holding(lr_job("local-held", 1, 5, 0, 0, c.dir().str() + "/runs"), 2));
  auto r = c.submit({"--local", "run", job});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("run.hold_before_step 2: the cluster embedded in this process has no "
                                    "`submit release`"));
}

TEST_CASE(
    "with scaling.bind_cores_to_rank each rank of a node keeps to its own share of the CPUs "
    "and says which in its first line",
    "[cluster]") {
  test_cluster c;
  const auto job =
      c.write_job(lr_job("bound", 2, 3, 0, 0, c.dir().str() + "/runs", R"(, "bind_cores_to_rank": true)"));
  const auto r = c.submit({"--local", "--num-cpus", "2", "run", job});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto allowed = cohort::core::proc::allowed_cpus();  // the workers' too: they inherit it
  for (int rank = 0; rank < 2; ++rank) {
    const auto share = cohort::core::proc::cpu_share(allowed, rank, 2);
    CHECK_THAT(
        r.out + r.err,
        Catch::Contains("rank " + std::to_string(rank) + " of job ") &&
            Catch::Contains("bound to CPUs " + cohort::core::proc::cpu_list_text(share) + " (local rank " +
                            std::to_string(rank) + " of 2 on " + std::to_string(allowed.size()) + " CPUs)"));
  }
}

namespace {

// The pid in a job output line's prefix, "(worker rank=R node=N pid=P) ...".
int pid_in(const std::string& line) {
  static const std::regex prefix("\\(worker rank=[0-9]+ node=[^ ]+ pid=([0-9]+)\\)");
  std::smatch m;
  if (!std::regex_search(line, m, prefix)) throw std::runtime_error("no worker pid in: " + line);
  return std::stoi(m[1]);
}

}  // namespace

TEST_CASE("submit --local runs each rank in a cohort-worker process of its own, and a rank killed "
          "with kill -9 is retried under the job's failure policy",
          "[cluster]") {
  test_cluster c;
  // Steps slow enough that no attempt ends by itself while the test looks on; max_failures 1: one
  // restart, then the job fails.
  const auto job = c.write_job(lr_job("local-ranks", 2, 1000000, 0.05, 1, c.dir().str() + "/runs"));
  cohort::test::running_process run(
      {c.program("submit"), "--local", "--num-cpus", "2", "run", job}, {});
  const std::string first_line_of = "cohort-worker: rank ";
  auto rank0 = pid_in(run.wait_for_line(first_line_of + "0 of job", 120s));
  auto rank1 = pid_in(run.wait_for_line(first_line_of + "1 of job", 120s));
  // Both ranks are processes of their own, neither of them submit's (which became cohort-local).
  CHECK(rank0 != rank1);
  CHECK(rank0 != run.pid());
  CHECK(rank1 != run.pid());
  CHECK_THAT(run.output(), Catch::Contains("cohort-worker: rank 1 of job") &&
                               Catch::Contains("(pid " + std::to_string(rank1) + ")"));

  REQUIRE(::kill(rank1, SIGKILL) == 0);
  // The policy restarts the group: new processes for both ranks.
  auto restarted = pid_in(run.wait_for_lines(first_line_of + "1 of job", 2, 120s).back());
  CHECK(restarted != rank1);
  CHECK(pid_in(run.wait_for_lines(first_line_of + "0 of job", 2, 120s).back()) != rank0);
  // The second failure is one more than max_failures allows.
  REQUIRE(::kill(restarted, SIGKILL) == 0);
  REQUIRE(run.wait_for_exit(120s));
  const auto out = run.output();
  INFO(out);
  CHECK(run.exit_code() == 1);
  CHECK_THAT(out, Catch::Contains(") FAILED: ") && Catch::Contains("[attempts 2]") &&
                      Catch::Contains("SIGKILL"));
}

TEST_CASE_METHOD(head_and_one_node, "a job's runtime_env.env_vars reach its worker processes, and CPU workers see no GPU",
          "[cluster]") {
  auto spec = json::parse(lr_job("with-env", 2, 5, 0.0, 0, c.dir().str() + "/runs"));
  spec["runtime_env"]["env_vars"] = {{"NCCL_DEBUG", "INFO"}, {"COHORT_GPU_MEMORY_LIMIT_GB", "20"}};
  auto run = c.submit({"run", c.write_job(spec.dump()), "--follow"});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto logs = c.submit({"logs", first_line(run.out)});
  REQUIRE(logs.exit_code == 0);
  INFO(logs.out);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string start = "cohort-worker: rank " + std::to_string(rank) + " of job ";
    auto at = logs.out.find(start);
    REQUIRE(at != std::string::npos);
    const auto line = logs.out.substr(at, logs.out.find('\n', at) - at);
    CHECK_THAT(line, Catch::Contains("no GPU (CUDA_VISIBLE_DEVICES=\"\""));
    CHECK_THAT(line, Catch::EndsWith("job environment: COHORT_GPU_MEMORY_LIMIT_GB NCCL_DEBUG"));
  }
  auto bad = spec;
  bad["runtime_env"]["env_vars"] = {{"LD_PRELOAD", "/tmp/x.so"}};
  auto refused = c.submit({"run", c.write_job(bad.dump())});
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains("runtime_env.env_vars.LD_PRELOAD: refused"));
}

TEST_CASE_METHOD(head_and_one_node, "a job whose runtime_env names a network interface its node lacks fails at once as bad "
          "input, naming the variable, the interface and the node's interfaces",
          "[cluster]") {
  auto spec = json::parse(lr_job("no-such-nic", 2, 5, 0.0, -1, c.dir().str() + "/runs"));
  spec["runtime_env"]["env_vars"] = {{"GLOO_SOCKET_IFNAME", "nosuch0"}};
  const auto id = start_job(c, c.write_job(spec.dump()));
  const auto reason = failed_on_its_input(c, id);
  CHECK_THAT(reason, Catch::Contains(" on node n1 ") &&
                         Catch::Contains("runtime_env.env_vars.GLOO_SOCKET_IFNAME: there is no network "
                                         "interface 'nosuch0'; this machine's interfaces: lo (127.0.0.1"));
}

TEST_CASE("cluster-worker exits 2 naming the option when --collective-interface names no interface of "
          "the machine or no interface holds --node-address",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  const std::vector<std::string> node{"--address", c.address(), "--credentials", c.credentials(),
                                      "--name", "n1", "--num-cpus", "1", "--connect-timeout", "1"};
  auto args = node;
  args.insert(args.end(), {"--collective-interface", "nosuch0"});
  const auto no_nic = c.run("cluster-worker", args);
  INFO(no_nic.out << no_nic.err);
  CHECK(no_nic.exit_code == 2);
  CHECK_THAT(no_nic.err, Catch::Contains("--collective-interface nosuch0: there is no network interface "
                                         "'nosuch0'; this machine's interfaces: lo (127.0.0.1"));
  args = node;
  args.insert(args.end(), {"--node-address", "192.0.2.7"});  // TEST-NET-1: never a local address
  const auto elsewhere = c.run("cluster-worker", args);
  INFO(elsewhere.out << elsewhere.err);
  CHECK(elsewhere.exit_code == 2);
  CHECK_THAT(elsewhere.err, Catch::Contains("--node-address 192.0.2.7: no network interface of this "
                                            "machine holds it"));
}

namespace {

// COHORT_WORKER_SETUP for a cohort-worker started by hand: rank 0 of 1 of job-0001 on node n1
// with `gpus`, the spec parsed from `spec_json` as a head parses it.
std::string hand_setup(const std::string& spec_json, std::vector<std::int32_t> gpus) {
  cohort::actors::worker_setup setup;
  setup.job_id = "job-0001";
  setup.spec = cohort::config::parse_job_spec(spec_json);
  setup.node = "n1";
  setup.store_address = "127.0.0.1:1";
  setup.gpus = std::move(gpus);
  setup.store_secret = std::string(64, 'a');
  return cohort::actors::worker_setup_to_json(setup);
}

}  // namespace

TEST_CASE("a worker process given a GPU that it cannot see fails with a clear error", "[cluster]") {
  test_cluster c;
  const auto setup = hand_setup(gpu_lr_job("blind", 1, c.dir().str() + "/runs"), {0});
  auto r = c.run("cohort-worker", {},
                 {{"COHORT_WORKER_SETUP", setup}, {"CUDA_VISIBLE_DEVICES", "GPU-none"}});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("rank 0 on node n1: scaling.resources_per_worker.GPU is 1 but "
                                    "this worker sees no GPU (CUDA_VISIBLE_DEVICES=\"GPU-none\""));
  CHECK_THAT(r.out, Catch::Contains("cohort-worker: rank 0 of job job-0001 on node n1"));
}

TEST_CASE("a cohort-worker whose node opens its command link with another version fails before it "
          "runs, saying so on its report link",
          "[cluster]") {
  test_cluster c;
  const auto setup = hand_setup(lr_job("other-build", 1, 5, 0.0, 0, c.dir().str() + "/runs"), {});
  std::mutex m;
  std::condition_variable cv;
  std::string out, reports;
  std::optional<cohort::core::proc::exit_status> ended;
  cohort::core::proc::child_process worker(
      {c.program("cohort-worker")}, {{"COHORT_WORKER_SETUP", setup}},
      [&](const std::string& line) {
        std::lock_guard<std::mutex> lock(m);
        out += line + "\n";
      },
      [&](const cohort::core::proc::exit_status& s) {
        std::lock_guard<std::mutex> lock(m);
        ended = s;
        cv.notify_all();
      },
      [&](const std::string& bytes) {
        std::lock_guard<std::mutex> lock(m);
        reports += bytes;
      },
      /*command_pipe=*/true);
  // link_hello of the next version, as a node of a later build writes it (its bytes never change:
  // tests/actors/worker_link_test.cpp pins them).
  const auto later = cohort::actors::worker_link_version + 1;
  REQUIRE(worker.write_commands(cohort::actors::link_frame(cohort::actors::link_hello{later})));
  std::unique_lock<std::mutex> lock(m);
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return ended.has_value(); }));
  INFO(out);
  CHECK(ended->code == 1);
  // Its report link carries its final word (a msgpack string inside the frame).
  CHECK_THAT(reports, Catch::Contains("rank 0 on node n1: the command link from its node did not "
                                      "open: the peer speaks version " + std::to_string(later) +
                                      " of the worker link and this end version " +
                                      std::to_string(cohort::actors::worker_link_version)));
  CHECK_THAT(out, !Catch::Contains("step"));
}

TEST_CASE("a job whose ranks need more host RAM than any node has is refused with the numbers",
          "[cluster][memory]") {
  test_cluster c;
  c.start_head();
  c.start_worker("small", 2, "", {"--memory", "100000"});
  const auto job = c.write_job(tiny_llama_job("too-big", c.dir().str() + "/data", c.dir().str() + "/runs", 0));
  const auto run = c.submit({"run", job, "--follow"});
  INFO(run.out << run.err);
  CHECK(run.exit_code == 1);
  const std::string refusal = "rank memory plan: ";
  const std::string numbers = "of host RAM per rank (ZeRO-2, fp32, no offload) exceeds every "
                              "node's memory (largest: 0.1 MiB)";
  CHECK_THAT(run.out, Catch::Contains("FAILED") && Catch::Contains(refusal) && Catch::Contains(numbers));
  const auto status = c.status(first_line(run.out));
  CHECK(status["state"] == "FAILED");
  CHECK(status["attempts"] == 0);  // never started
  CHECK_THAT(status["reason"].get<std::string>(), Catch::Contains(numbers));
}

TEST_CASE("submit plan prints each rank's GPU memory and host RAM, and refuses what no GPU holds",
          "[cluster][memory]") {
  test_cluster c;
  auto spec = json::parse(tiny_llama_job("planned", c.dir().str() + "/data", c.dir().str() + "/runs", 0));
  spec["scaling"] = {{"num_workers", 2}, {"use_gpu", true}, {"resources_per_worker", {{"GPU", 1}}}};
  spec["train"]["precision"] = "bf16";
  const auto job = c.write_job(spec.dump());
  const auto nodes = [&](double gpu_memory) {
    const std::string path = c.dir().str() + "/nodes.json";
    std::ofstream(path) << json::array({{{"name", "g1"}, {"resources", {{"CPU", 4}, {"GPU", 2}, {"memory", 64e9}}},
                                         {"gpu_memory", gpu_memory}}}).dump();
    return path;
  };
  const auto as_json = c.submit({"plan", job, "--nodes", nodes(24e9), "--json"});
  INFO(as_json.out << as_json.err);
  REQUIRE(as_json.exit_code == 0);
  const auto plan = json::parse(as_json.out);
  const auto& per_rank = plan["memory"]["per_rank"];
  CHECK(plan["ranks"] == json::array({"g1", "g1"}));
  CHECK(per_rank["device_bytes"].get<double>() > plan["memory"]["cuda_context_bytes"].get<double>());
  CHECK(per_rank["host_bytes"] == std::max(per_rank["steady_host_bytes"].get<double>(),
                                           per_rank["load_peak_host_bytes"].get<double>()));
  REQUIRE(plan["memory"]["ranks"].size() == 2);
  CHECK(plan["memory"]["ranks"][1]["device_bytes"] == per_rank["device_bytes"]);
  CHECK(plan["memory"]["ranks"][0]["host_bytes"].get<double>() ==
        per_rank["host_bytes"].get<double>() + plan["memory"]["rank0_extra_host_bytes"].get<double>());

  const auto human = c.submit({"plan", job, "--nodes", nodes(24e9)});
  INFO(human.out << human.err);
  REQUIRE(human.exit_code == 0);
  CHECK_THAT(human.out, Catch::Contains("job planned: 2 ranks on 1 node, trainer on g1") &&
                            Catch::Contains("NODE  RANKS\n  g1    0,1\n") &&
                            Catch::Contains("RANK  NODE  GPU MEMORY  HOST RAM") &&
                            Catch::Contains("\n  1     g1    1.0 GiB     ") &&
                            Catch::Contains("memory per rank (ZeRO-2, bf16, no offload") &&
                            Catch::Contains("CUDA context and allocator"));

  const auto refused = c.submit({"plan", job, "--nodes", nodes(5e8)});
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains("on the GPU per rank (ZeRO-2, bf16, no offload) exceeds every "
                                          "node's GPU memory (largest: 476.8 MiB)"));
}

TEST_CASE_METHOD(head_and_one_node, "submit plan against a running cluster places the job on its nodes without starting it",
          "[cluster][memory]") {
  const auto job = c.write_job(tiny_llama_job("planned-live", c.dir().str() + "/data", c.dir().str() + "/runs", 0));
  const auto plan = c.submit({"plan", job});
  INFO(plan.out << plan.err);
  REQUIRE(plan.exit_code == 0);
  // The head computed each rank's memory: the client has no engine to do it.
  CHECK_THAT(plan.out, Catch::Contains("NODE  RANKS\n  n1    0,1\n") &&
                           Catch::Contains("\n  0     n1    ") && Catch::Contains("\n  1     n1    ") &&
                           Catch::Contains("memory per rank (ZeRO-2, fp32, no offload"));
  const auto as_json = c.submit({"plan", job, "--json"});
  INFO(as_json.out << as_json.err);
  REQUIRE(as_json.exit_code == 0);
  const auto live = json::parse(as_json.out);
  CHECK(live["ranks"] == json::array({"n1", "n1"}));
  CHECK(live["memory"]["setting"] == "ZeRO-2, fp32, no offload");
  REQUIRE(live["memory"]["ranks"].size() == 2);
  CHECK(live["memory"]["ranks"][0]["host_bytes"].get<double>() ==
        live["memory"]["per_rank"]["host_bytes"].get<double>() +
            live["memory"]["rank0_extra_host_bytes"].get<double>());
  const auto list = c.submit({"list", "--json"});
  REQUIRE(list.exit_code == 0);
  CHECK(json::parse(list.out)["jobs"].empty());  // planning submitted nothing
}

namespace {

// The `submit` subcommand that sends each request of the client table (actors/client_protocol.hpp).
// A request added to the table without one here does not compile.
namespace actors = cohort::actors;
const char* subcommand_for(const actors::submit_job&) { return "run"; }
const char* subcommand_for(const actors::job_query&) { return "status"; }
const char* subcommand_for(const actors::job_list_query&) { return "list"; }
const char* subcommand_for(const actors::stop_job&) { return "stop"; }
const char* subcommand_for(const actors::checkpoint_job&) { return "checkpoint"; }
const char* subcommand_for(const actors::release_job&) { return "release"; }
const char* subcommand_for(const actors::follow_job&) { return "run --follow"; }
const char* subcommand_for(const actors::logs_query&) { return "logs"; }
const char* subcommand_for(const actors::follow_logs&) { return "logs -f"; }
const char* subcommand_for(const actors::plan_request&) { return "plan"; }
const char* subcommand_for(const actors::drain_node&) { return "drain"; }

}  // namespace

TEST_CASE_METHOD(head_and_one_node, "every client request of the protocol table gets its real reply from a running head "
          "through submit",
          "[cluster]") {
  std::set<std::string> answered;  // subcommands whose request got its reply
  const auto ok = [&](const cohort::test::command_result& r, const char* subcommand) {
    INFO("submit " << subcommand << ": " << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    answered.insert(subcommand);
    return r.out;
  };
  const auto data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  auto spec = json::parse(holding(tiny_llama_job("every-request", data, c.dir().str() + "/runs", 0), 2));
  spec["train"]["max_steps"] = 4;
  const auto job = c.write_job(spec.dump());

  // plan_request → plan_reply: the placement on the live node, nothing submitted.
  CHECK_THAT(ok(c.submit({"plan", job}), "plan"), Catch::Contains("\n  1     n1    "));
  CHECK(json::parse(c.submit({"plan", job, "--json"}).out)["ranks"] == json::array({"n1", "n1"}));
  // submit_job → job_accepted: the new job's id.
  const auto id = first_line(ok(c.submit({"run", job}), "run"));
  CHECK(id.rfind("job-", 0) == 0);
  c.wait_for(id, [](const json& s) { return held_before(s, 2); }, 120s);
  // job_query → job_record.
  CHECK_THAT(ok(c.submit({"status", id}), "status"),
             Catch::Contains(id + " (every-request) RUNNING") && Catch::Contains("held before step 2"));
  // job_list_query → job_list: the job and the node.
  const auto list = json::parse(ok(c.submit({"list", "--json"}), "list"));
  REQUIRE(list["jobs"].size() == 1);
  CHECK(list["jobs"][0]["id"] == id);
  REQUIRE(list["nodes"].size() == 1);
  CHECK(list["nodes"][0]["name"] == "n1");
  // checkpoint_job → job_record; release_job → job_record.
  CHECK_THAT(ok(c.submit({"checkpoint", id}), "checkpoint"), Catch::Contains("checkpoint requested: job " + id));
  CHECK_THAT(ok(c.submit({"release", id}), "release"),
             Catch::Contains("released: job " + id + " goes on with step 2"));
  // follow_logs → followed_logs and job_event until the job ends: every line, also those logged
  // between the reply and the first event.
  const auto followed = ok(c.submit({"logs", id, "-f"}), "logs -f");
  CHECK_THAT(followed, Catch::Contains("released: running step 2") &&
                           Catch::Contains("checkpoint requested: saving after step 2") &&
                           Catch::Contains("rank 0 done: final loss"));
  CHECK(c.status(id)["state"] == "SUCCEEDED");
  CHECK_THAT(ok(c.submit({"logs", id}), "logs"), Catch::Contains("(worker rank=1 node=n1 pid="));
  CHECK(std::filesystem::exists(c.dir().str() + "/runs/every-request/checkpoints/step-00000002/COMMITTED"));
  // follow_job → job_record and job_event until the job ends (`submit run --follow`, which
  // exits 1 for a job that did not succeed); stop_job → job_record of the stopped job.
  cohort::test::running_process run_follow(
      {c.program("submit"), "run", c.write_job(holding(lr_job("to-stop", 1, 5, 0, 0, c.dir().str() + "/runs"), 2)),
       "--follow"},
      {{"COHORT_ADDRESS", c.address()}, {"COHORT_CREDENTIALS", c.credentials()}});
  const auto held = first_line(run_follow.wait_for_line("job-", 60s));
  c.wait_for(held, [](const json& s) { return held_before(s, 2); }, 60s);
  CHECK_THAT(ok(c.submit({"stop", held}), "stop"), Catch::Contains(held + " (to-stop) STOPPED: stopped on request"));
  REQUIRE(run_follow.wait_for_exit(60s));
  INFO(run_follow.output());
  CHECK_THAT(run_follow.output(), Catch::Contains("STOPPED"));
  answered.insert("run --follow");
  // drain_node → drain_reply, both ways.
  CHECK_THAT(ok(c.submit({"drain", "n1"}), "drain"),
             Catch::Contains("node n1 drained: no new placement on it until `submit undrain n1`; no job had "
                             "ranks there"));
  CHECK_THAT(c.submit({"undrain", "n1"}).out, Catch::Contains("node n1 is schedulable again"));

  std::size_t requests = 0;
  actors::for_each_client_call([&](auto call) {
    using request = typename decltype(call)::request;
    INFO("the request that `submit " << subcommand_for(request{}) << "` sends");
    CHECK(answered.count(subcommand_for(request{})) == 1);
    ++requests;
  });
  CHECK(requests == actors::client_calls::size);
}

TEST_CASE_METHOD(head_and_one_node, "submit following a job's output runs without libtorch, and --help lists only user "
          "options",
          "[cluster][client]") {
  const auto id = start_job(c, c.write_job(holding(lr_job("light", 1, 3, 0, 0, c.dir().str() + "/runs"), 2)));
  c.wait_for(id, [](const json& s) { return held_before(s, 2); }, 60s);
  // A running `submit logs -f` that has printed the job's output is past its start: every library
  // it loads is mapped.
  cohort::test::running_process follower({c.program("submit"), "logs", id, "-f"},
                                         {{"COHORT_ADDRESS", c.address()},
                                          {"COHORT_CREDENTIALS", c.credentials()}});
  follower.wait_for_line("held before step 2", 60s);
  std::ifstream maps_file("/proc/" + std::to_string(follower.pid()) + "/maps");
  const std::string maps((std::istreambuf_iterator<char>(maps_file)), std::istreambuf_iterator<char>());
  INFO(maps);
  CHECK_THAT(maps, Catch::Contains("libzmq"));  // the client's own libraries are listed
  CHECK_THAT(maps, !Catch::Contains("libtorch") && !Catch::Contains("libc10"));
  release(c, id);
  REQUIRE(follower.wait_for_exit(60s));
  CHECK(c.status(id)["state"] == "SUCCEEDED");

  const auto help = c.submit({"--help"});
  INFO(help.out << help.err);
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Catch::Contains("--address") && Catch::Contains("--local"));
  CHECK_THAT(help.out, !Catch::Contains("--command") && !Catch::Contains("--arg"));
}

TEST_CASE("relative paths in a spec are resolved by submit against the spec's directory, whatever the "
          "worker's working directory",
          "[cluster]") {
  namespace fs = std::filesystem;
  test_cluster c;
  c.start_head();
  // Deeper than any test working directory, so that a path made relative to submit's directory
  // cannot reach the data from here by climbing to / either.
  const std::string elsewhere = c.dir().path("w/o/r/k/e/r/s/worker-cwd");
  fs::create_directories(elsewhere);
  c.start_worker("n1", 2, "", {}, elsewhere);
  // jobs/job.json says "data" and "runs"; submit is given the spec by a relative path from its
  // own working directory, which is neither the spec's directory nor the worker's.
  cohort::test::make_tiny_dataset(c.dir().path("jobs/data"));
  const std::string job = c.dir().write("jobs/job.json", tiny_llama_job("relative", "data", "runs", 0));
  const std::string job_arg = fs::relative(job, fs::current_path()).string();
  REQUIRE(fs::path(job_arg).is_relative());
  auto run = c.submit({"run", job_arg, "--follow"});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const auto id = first_line(run.out);
  CHECK(c.status(id)["state"] == "SUCCEEDED");
  CHECK(cohort::test::read_json_lines(c.dir().path("jobs/runs/relative/metrics.jsonl")).size() == 24);
  CHECK_FALSE(fs::exists(fs::path(elsewhere) / "runs"));
}

TEST_CASE_METHOD(head_and_one_node, "a T5 job on a seq2seq data set runs through the cluster to its metrics, checkpoint and "
          "exported model",
          "[cluster][t5]") {
  const auto data = cohort::test::make_tiny_seq2seq_dataset(c.dir().path("pairs"));
  const std::string job = R"({"name": "t5", "workload": "causal_lm",
    "model": {"hf_dir": ")" + std::string(COHORT_MODEL_FIXTURES) + R"(/t5-v1_0"},
    "data": {"train": ")" + data + R"(", "eval": ")" + data + R"("},
    "scaling": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
    "train": {"micro_batch_size": 2, "grad_accum": 2, "max_steps": 4, "lr": 0.003, "seed": 3,
              "eval_every": 2},
    "zero": {"stage": 3},
    "run": {"storage_path": ")" + c.dir().path("runs") + R"(", "checkpoint": {"every_steps": 2}}})";
  const auto metrics = followed_to_success(c, job, "t5");
  REQUIRE(metrics.size() == 4);
  CHECK(metrics[1].contains("eval_loss"));
  const auto config = json::parse(cohort::test::read_file(c.dir().path("runs/t5/model/config.json")));
  CHECK(config["model_type"] == "t5");
  CHECK(std::filesystem::exists(c.dir().path("runs/t5/model/model.safetensors")));
}

TEST_CASE_METHOD(head_and_one_node, "a reward model job on a pairs data set runs through the cluster to its metrics "
          "and a LlamaForSequenceClassification export",
          "[cluster][reward]") {
  const auto data = cohort::test::make_tiny_pairs_dataset(c.dir().path("pairs"));
  auto spec = json::parse(R"({"name": "reward", "workload": "reward_model",
    "scaling": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
    "train": {"seq_len": 16, "micro_batch_size": 2, "grad_accum": 2, "max_steps": 4, "lr": 0.01, "seed": 3,
              "eval_every": 2},
    "zero": {"stage": 2}})");
  spec["model"] = {{"config", json::parse(cohort::test::tiny_llama_config())}, {"init_seed", 7}};
  spec["data"] = {{"train", data}, {"eval", data}};
  spec["run"] = {{"storage_path", c.dir().path("runs")}, {"checkpoint", {{"every_steps", 2}}}};
  const auto metrics = followed_to_success(c, spec.dump(), "reward");
  REQUIRE(metrics.size() == 4);
  CHECK(metrics[0].contains("accuracy"));
  CHECK(metrics[0].contains("chosen_mean"));
  CHECK(metrics[1].contains("eval_accuracy"));
  const auto config = json::parse(cohort::test::read_file(c.dir().path("runs/reward/model/config.json")));
  CHECK(config["architectures"] == json::array({"LlamaForSequenceClassification"}));
  CHECK(config["num_labels"] == 1);
  // A causal_lm job on the same pairs is refused at submit, naming data.train and reward_model.
  spec["name"] = "not-reward";
  spec["workload"] = "causal_lm";
  auto refused = c.submit({"run", c.write_job(spec.dump())});
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains("data.train") && Catch::Contains("reward_model"));
}

TEST_CASE_METHOD(head_and_one_node, "a job whose data set lost a shard fails at once as bad input under max_failures -1, "
          "after one attempt",
          "[cluster]") {
  const auto data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  REQUIRE(std::filesystem::remove(data + "/shard-00000.tokens"));  // the manifest still reads
  const auto id = start_job(c, c.write_job(tiny_llama_job("no-shard", data, c.dir().str() + "/runs", 0)));
  const auto reason = failed_on_its_input(c, id);
  CHECK_THAT(reason, Catch::Contains("data.train: ") && Catch::Contains("shard-00000"));
  CHECK_THAT(c.submit({"status", id}).out, Catch::Contains("FAILED: bad input"));
}

TEST_CASE("submit refuses with exit 2 a data.train that is not a data set and a spec nested "
          "200000 deep",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  auto spec = json::parse(tiny_llama_job("passwd", "/etc/passwd", c.dir().str() + "/runs", 0));
  const auto passwd = c.submit({"run", c.write_job(spec.dump())});
  INFO(passwd.out << passwd.err);
  CHECK(passwd.exit_code == 2);
  CHECK_THAT(passwd.err, Catch::Contains("data.train: \"/etc/passwd\" is not a directory"));
  const auto deep = c.submit({"run", c.write_job(std::string(200000, '['))});
  INFO(deep.out << deep.err);
  CHECK(deep.exit_code == 2);
  CHECK_THAT(deep.err, Catch::Contains("deeper than the limit of 64 levels"));
  const auto listed = c.submit({"list", "--json"});
  CHECK(json::parse(listed.out)["jobs"].empty());  // neither reached the head
}

TEST_CASE_METHOD(head_and_one_node, "a spec larger than one environment variable holds (over 128 KiB) runs to the end",
          "[cluster]") {
  auto spec = json::parse(lr_job("big-spec", 2, 5, 0, 0, c.dir().str() + "/runs"));
  for (int i = 0; i < 40; ++i)
    spec["runtime_env"]["env_vars"]["BIG_" + std::to_string(i)] = std::string(4000, 'a' + i % 26);
  const std::string text = spec.dump();
  REQUIRE(text.size() > 128 * 1024);
  const auto id = start_job(c, c.write_job(text));
  const auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  CHECK(s["attempts"] == 1);
}

TEST_CASE_METHOD(head_and_one_node, "a job no node set of the cluster can ever hold waits PENDING with the reason in status",
          "[cluster]") {
  const auto id = start_job(c, c.write_job(lr_job("huge", 65536, 5, 0, 0, c.dir().str() + "/runs")));
  const auto s = c.wait_for(
      id, [](const json& s) { return s["reason"].get<std::string>().rfind("infeasible", 0) == 0; }, 60s);
  CHECK(s["state"] == "PENDING");
  CHECK_THAT(s["reason"].get<std::string>(),
             Catch::StartsWith("infeasible on the current cluster: needs 65536 workers") &&
                 Catch::Contains("has 1 alive nodes"));
  CHECK_THAT(c.submit({"status", id}).out, Catch::Contains("PENDING: infeasible on the current cluster"));
}

TEST_CASE("a head with --storage-root refuses at submit a job whose storage_path is \"/\", naming "
          "the field, the path and the roots",
          "[cluster]") {
  test_cluster c;
  const auto root = std::filesystem::canonical(c.dir().path()).string() + "/shared";
  std::filesystem::create_directories(root);
  c.start_head({"--storage-root", root});
  const auto refused = c.submit({"run", c.write_job(lr_job("escape", 1, 2, 0, 0, "/"))});
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.err, Catch::Contains("run.storage_path: \"/\" is outside the cluster's "
                                          "storage roots (" + root + ")"));
  CHECK(json::parse(c.submit({"list", "--json"}).out)["jobs"].empty());
  // A job under the root is accepted (it waits PENDING: no node has joined).
  const auto inside = c.submit({"run", c.write_job(lr_job("inside", 1, 2, 0, 0, root + "/runs"))});
  INFO(inside.out << inside.err);
  CHECK(inside.exit_code == 0);
  CHECK(json::parse(c.submit({"list", "--json"}).out)["jobs"].size() == 1);
}

TEST_CASE("a head that takes the lease but cannot bind its port says so, gives the lease back "
          "and exits 1",
          "[cluster]") {
  test_cluster c;
  cohort::test::tcp_listener held("127.0.0.1", 0);  // the port, held by a plain listening socket
  REQUIRE(held.bound());
  const auto port = std::to_string(held.port());
  // A long lease: one it kept would hold a second head off for 10 minutes.
  const auto blocked =
      c.run("cluster-head", {"--store", c.store(), "--port", port, "--lease-ttl", "600"});
  held.close();
  INFO(blocked.out << blocked.err);
  CHECK(blocked.exit_code == 1);
  CHECK_THAT(blocked.err, Catch::Contains("cannot serve on 127.0.0.1:" + port) &&
                              Catch::Contains("Address already in use") &&
                              Catch::Contains("gave the leader lease (epoch 1) back"));
  cohort::core::store::leader_lease lease(c.store());
  const auto record = lease.current();
  REQUIRE(record);
  CHECK(record->expired_at(cohort::core::store::system_clock_ms()));
  c.start_head();  // takes the lease at once: no standby wait
  CHECK_THAT(c.head().output(), !Catch::Contains("standby") && Catch::Contains("epoch 2"));
}

TEST_CASE(
    "a cluster's first head starts on another port where another process took the one "
    "picked for it",
    "[cluster]") {
  test_cluster c;
  const std::string picked = c.address();
  // Held here, or taken by someone else since it was picked: either way no head can bind it.
  cohort::test::tcp_listener held("127.0.0.1", std::stoi(picked.substr(picked.rfind(':') + 1)));
  c.start_head();
  CHECK(c.address() != picked);
  CHECK_THAT(c.head().output(), Catch::Contains("serving on " + c.address()) && Catch::Contains("epoch 2"));
  c.start_worker("n1", 1);  // joins at the address the head serves on
  const auto listed = json::parse(c.submit({"list", "--json"}).out);
  CHECK(listed["nodes"].size() == 1);
}

TEST_CASE("a cluster-worker whose key does not authenticate, or that gets no answer, exits 1 "
          "naming the head within its connect timeout",
          "[cluster]") {
  test_cluster c;
  test_cluster other;
  other.start_head();  // its credentials hold another server key
  SECTION("another cluster's credentials") {
    c.start_head();
    const auto r = c.run("cluster-worker", {"--address", c.address(), "--credentials",
                                            other.credentials(), "--name", "n1", "--num-cpus", "1",
                                            "--connect-timeout", "2"});
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("cannot join the head at " + c.address()) &&
                          Catch::Contains("did not authenticate"));
  }
  SECTION("no head at the address") {
    const auto r = c.run("cluster-worker", {"--address", c.address(), "--credentials",
                                            other.credentials(), "--name", "n1", "--num-cpus", "1",
                                            "--connect-timeout", "1"});
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("cannot join the head at " + c.address() +
                                      ": no answer within 1 s"));
  }
}

TEST_CASE("a head that lost the leadership answers clients that it is stepping down and who "
          "leads now",
          "[cluster]") {
  test_cluster c;
  c.start_head({"--step-down-grace", "120"});
  c.head().kill(SIGSTOP);
  const int port = cohort::test::free_port();
  auto standby = c.start_other_head(port);
  standby->wait_for_line("serving on", 60s);  // after the stopped head's 3 s lease ran out
  c.head().kill(SIGCONT);
  c.head().wait_for_line("is stepping down", 60s);
  const auto r = c.submit({"list"});
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("is stepping down") &&
                        Catch::Contains("lost the leadership to") &&
                        Catch::Contains("at 127.0.0.1:" + std::to_string(port)));
  CHECK_THAT(r.err, !Catch::Contains("do not match"));
  const auto served = c.submit({"list", "--json"}, {{"COHORT_ADDRESS", "127.0.0.1:" + std::to_string(port)}});
  CHECK(served.exit_code == 0);
}

namespace {

// A copy of the cluster's credentials outside the store: a client on another host, which can
// find the leader only through the heads' answers.
std::string credentials_outside_store(test_cluster& c) {
  const auto dir = c.dir().str() + "/elsewhere";
  std::filesystem::create_directories(dir);
  const auto copy = dir + "/credentials.json";
  std::filesystem::copy_file(c.credentials(), copy, std::filesystem::copy_options::overwrite_existing);
  return copy;
}

// A standby head on 127.0.0.2 (standing for another host) beside the cluster's leader, once it
// waits; the cluster's clients are given both addresses from then on.
struct standby_head {
  std::unique_ptr<cohort::test::running_process> process;
  std::string address;  // the standby's
  std::string both;     // "leader,standby"
};
standby_head start_standby_elsewhere(test_cluster& c) {
  const auto port = cohort::test::free_port();
  standby_head h{c.start_other_head(port, {"--bind", "127.0.0.2"}), "127.0.0.2:" + std::to_string(port),
                 ""};
  h.process->wait_for_line("waiting as a standby", 60s);
  h.both = c.address() + "," + h.address;
  c.use_address(h.both);
  return h;
}

// The command line of a cluster-worker named `name` with `cpus` CPUs that knows the heads
// `addresses`.
std::vector<std::string> node_args(test_cluster& c, const std::string& name, const std::string& addresses,
                                   const std::string& credentials, int cpus) {
  return {c.program("cluster-worker"),
          "--address",
          addresses,
          "--credentials",
          credentials,
          "--name",
          name,
          "--num-cpus",
          std::to_string(cpus)};
}
std::vector<std::string> node_n1_args(test_cluster& c, const std::string& addresses,
                                      const std::string& credentials, int cpus) {
  return node_args(c, "n1", addresses, credentials, cpus);
}

// `submit list --json` until `node` is listed; the listing.
json wait_for_node(test_cluster& c, const std::string& node, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto r = c.submit({"list", "--json"});
    last = r.out + r.err;
    if (r.exit_code == 0) {
      auto list = json::parse(r.out);
      for (const auto& n : list["nodes"])
        if (n["name"] == node) return list;
    }
    std::this_thread::sleep_for(200ms);
  }
  throw std::runtime_error("node " + node + " was never listed; last answer: " + last);
}

// After the leader stopped serving: the standby serves, `node` joins it, the job held before
// `step` is adopted there and, released, ends SUCCEEDED in its first attempt.
void adopted_and_finished(test_cluster& c, cohort::test::running_process& standby,
                          cohort::test::running_process& node, const std::string& standby_address,
                          const std::string& id, int step) {
  standby.wait_for_line("serving on", 60s);
  node.wait_for_line("joined the leader at " + standby_address, 60s);
  c.wait_for(id, [step](const json& s) { return held_and_adopted(s, step); }, 120s);
  release(c, id);
  const auto done =
      c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED" || s["state"] == "FAILED"; }, 120s);
  INFO(done.dump());
  CHECK(done["state"] == "SUCCEEDED");
  CHECK(done["attempts"] == 1);
}

// The cluster the failover cases start from: `c`'s leader (started already), a standby on 127.0.0.2,
// and node n1 with `cpus` CPUs given both addresses, registered with the leader. The node reads
// `node_credentials`: c.credentials() (in the store, so it also reads the leader record there) or
// a copy outside it (only the address list and the standby's answers lead it).
struct failover_cluster {
  standby_head standby;
  std::unique_ptr<cohort::test::running_process> node;
};
failover_cluster start_failover_cluster(test_cluster& c, const std::string& node_credentials, int cpus) {
  failover_cluster f{start_standby_elsewhere(c), nullptr};
  f.node = std::make_unique<cohort::test::running_process>(
      node_n1_args(c, f.standby.both, node_credentials, cpus), std::map<std::string, std::string>{});
  f.node->wait_for_line("joined the leader at " + c.address(), 60s);
  wait_for_node(c, "n1", 60s);
  return f;
}

// A two-worker linear-regression job of `steps` steps held before step `hold`, whose
// run.failure block is `failure` (without braces).
std::string hang_job(const std::string& name, int steps, int hold, const std::string& storage,
                     const std::string& failure) {
  auto text = lr_job(name, 2, steps, 0, -1, storage);
  const std::string block = R"("failure": {"max_failures": -1})";
  const auto at = text.find(block);
  REQUIRE(at != std::string::npos);
  return holding(text.replace(at, block.size(), R"("failure": {)" + failure + "}"), hold);
}

}  // namespace

TEST_CASE("a standby head on another port answers with who leads, and submit follows it to the "
          "leader",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  const auto standby_address = "127.0.0.1:" + std::to_string(cohort::test::free_port());
  auto standby = c.start_other_head(std::stoi(standby_address.substr(10)));
  standby->wait_for_line("waiting as a standby, answering on " + standby_address, 60s);
  const std::map<std::string, std::string> via_standby{
      {"COHORT_ADDRESS", standby_address}, {"COHORT_CREDENTIALS", credentials_outside_store(c)}};
  // The standby cannot serve a job itself: that it is listed by the leader proves the redirect.
  const auto run = c.submit({"run", c.write_job(lr_job("redirected", 1, 2, 0, 0, c.dir().str() + "/runs"))},
                            via_standby);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const auto id = first_line(run.out);
  const auto listed = c.submit({"list", "--json"}, via_standby);
  INFO(listed.out << listed.err);
  REQUIRE(listed.exit_code == 0);
  const auto jobs = json::parse(listed.out)["jobs"];
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0]["id"] == id);
  CHECK(json::parse(c.submit({"list", "--json"}).out)["jobs"].size() == 1);  // at the leader
  // A node given only the standby's address registers with the leader too.
  cohort::test::running_process node({c.program("cluster-worker"), "--address", standby_address,
                                      "--credentials", via_standby.at("COHORT_CREDENTIALS"),
                                      "--name", "n1", "--num-cpus", "1"},
                                     {});
  node.wait_for_line("joined the leader at " + c.address(), 60s);
  wait_for_node(c, "n1", 60s);
}

TEST_CASE("a client whose heads all fail names what each answered", "[cluster]") {
  test_cluster c;
  c.start_head();  // for the credentials; the list names two ports where nothing serves
  const auto a = "127.0.0.1:" + std::to_string(cohort::test::free_port());
  const auto b = "127.0.0.1:" + std::to_string(cohort::test::free_port());
  const auto r = c.submit({"list"}, {{"COHORT_ADDRESS", a + "," + b},
                                     {"COHORT_CREDENTIALS", credentials_outside_store(c)}});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("no head leads among " + a + ", " + b) &&
                        Catch::Contains(a + ": no answer from a head at " + a) &&
                        Catch::Contains(b + ": no answer from a head at " + b));
  const auto bad = c.submit({"list"}, {{"COHORT_ADDRESS", a + ",nowhere"}});
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Catch::Contains("head address \"nowhere\"") && Catch::Contains("HOST:PORT"));
}

TEST_CASE("after the leader is killed a standby at another address takes over; nodes given both "
          "addresses re-register with it, running jobs and their followers go on, and submit "
          "works with the list",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  // The node does not share the store: only the list (and the standby's answers) lead it.
  auto failover = start_failover_cluster(c, credentials_outside_store(c), 2);
  auto& standby = failover.standby.process;
  auto& node = *failover.node;
  const auto standby_address = failover.standby.address, both = failover.standby.both;
  // Followed by `submit run --follow` given both heads, which must see it to the end.
  cohort::test::running_process follower(
      {c.program("submit"), "run",
       c.write_job(holding(lr_job("across", 1, 6, 0, 0, c.dir().str() + "/runs"), 3)), "--follow"},
      {{"COHORT_ADDRESS", both}, {"COHORT_CREDENTIALS", c.credentials()}});
  const auto id = follower.wait_for_line("job-", 60s);
  c.wait_for(id, [](const json& s) { return held_before(s, 3); }, 60s);

  c.kill_head();  // kill -9
  standby->wait_for_line("serving on", 60s);  // once the dead leader's 3 s lease ran out
  node.wait_for_line("joined the leader at " + standby_address, 60s);
  const auto listed = wait_for_node(c, "n1", 60s);
  CHECK(listed["jobs"].size() == 1);
  // The new leader adopted the job's trainer (it reports the hold again), so the release reaches
  // the ranks.
  c.wait_for(id, [](const json& s) { return held_and_adopted(s, 3); }, 120s);
  release(c, id);
  // The job's trainer, adopted by the new leader, finishes the first attempt (max_failures 0:
  // a lost attempt would have failed the job).
  const auto done = c.wait_for(id, [](const json& s) {
    return s["state"] == "SUCCEEDED" || s["state"] == "FAILED";
  }, 120s);
  INFO(done.dump());
  CHECK(done["state"] == "SUCCEEDED");
  CHECK(done["attempts"] == 1);
  CHECK_THAT(follower.wait_for_line("(across) SUCCEEDED", 120s), Catch::Contains("[attempts 1]"));
  // A new job through the list runs on the re-registered node.
  const auto again = start_job(c, c.write_job(lr_job("after", 1, 3, 0, 0, c.dir().str() + "/runs")));
  CHECK(c.wait_for(again, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s)["rank_nodes"][0] == "n1");
}

TEST_CASE("a SIGSTOPped leader is replaced by a standby at another address; nodes that share the "
          "store re-register with it, the job goes on, and the woken leader steps down",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  // Its credentials lie in the store: the node also reads the leader record.
  auto failover = start_failover_cluster(c, c.credentials(), 2);
  auto& standby = failover.standby.process;
  auto& node = *failover.node;
  const auto standby_address = failover.standby.address, both = failover.standby.both;
  const auto id = start_job(c, c.write_job(holding(lr_job("paused", 1, 6, 0, 0, c.dir().str() + "/runs"), 3)));
  c.wait_for(id, [](const json& s) { return held_before(s, 3); }, 60s);

  c.head().kill(SIGSTOP);
  // The standby serves once the stopped leader's 3 s lease has run out.
  adopted_and_finished(c, *standby, node, standby_address, id, 3);
  c.head().kill(SIGCONT);
  c.head().wait_for_line("is stepping down", 60s);
  CHECK(c.head().wait_for_exit(60s));
}

TEST_CASE_METHOD(head_and_one_node, "a rank stopped with SIGSTOP mid-run is named hung in status (node, rank, pid, last step), "
          "killed, and the job restarts and succeeds; the rank waiting on it is not blamed",
          "[cluster]") {
  // The waiting rank's collective timeout (60 s) is far above the hang allowance (3 s): the
  // detector must decide, and it must name the stopped rank.
  auto job = c.write_job(hang_job("stalls", 8, 4, c.dir().str() + "/runs",
                                  R"("max_failures": -1, "hang_timeout_s": 3, "collective_timeout_s": 60)"));
  auto id = start_job(c, job);
  c.wait_for(id, [](const json& s) { return held_before(s, 4); }, 60s);
  const int pid = c.worker_pid(id, 1, "n1");
  REQUIRE(::kill(pid, SIGSTOP) == 0);
  release(c, id);  // rank 0 goes on into the next step's collective; rank 1 cannot
  // The restarted group holds again at step 4.
  c.wait_for(id, [](const json& s) { return held_before(s, 4, 2); }, 120s);
  release(c, id);
  auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  INFO(s.dump(2));
  CHECK(s["attempts"] == 2);
  REQUIRE(s["failures"].size() == 1);
  const auto& f = s["failures"][0];
  CHECK(f["rank"] == 1);
  CHECK(f["node"] == "n1");
  CHECK(f["hung"] == true);
  CHECK(f["pid"] == pid);
  CHECK(f["last_step"] == 3);
  // (Whether rank 0 was already inside the collective when the verdict came depends on how fast
  // the release reached it; the unit tests check that sentence.)
  CHECK_THAT(f["reason"].get<std::string>(),
             Catch::Contains("hung: rank 1 on node n1 (pid " + std::to_string(pid) + ")") &&
                 Catch::Contains("no heartbeat"));
  auto text = c.submit({"status", id});
  CHECK_THAT(text.out, Catch::Contains("failed: rank 1 on n1: hung: rank 1"));
  CHECK_THAT(c.submit({"logs", id}).out,
             Catch::Contains("killing its process " + std::to_string(pid) + " (SIGKILL)"));
  // The stopped process was killed before the group restarted: gone, or a zombie, never stopped.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  if (stat >> pid_field >> comm >> state) CHECK(state != "T");
}

TEST_CASE_METHOD(head_and_one_node, "a worker process killed by SIGSEGV leaves a crash report in status: the signal, its last "
          "lines and a native stack trace",
          "[cluster]") {
  // Held before step 3: it is killed mid-run however slow the machine is.
  auto job = c.write_job(hang_job("crashes", 6, 3, c.dir().str() + "/runs", R"("max_failures": 0)"));
  auto id = start_job(c, job);
  c.wait_for(id, [](const json& s) { return held_before(s, 3); }, 60s);
  const int pid = c.worker_pid(id, 1, "n1");
  REQUIRE(::kill(pid, SIGSEGV) == 0);
  auto s = c.wait_for(id, [](const json& s) { return s["state"] == "FAILED"; }, 60s);
  INFO(s.dump(2));
  REQUIRE(s["failures"].size() == 1);
  const auto& f = s["failures"][0];
  CHECK(f["rank"] == 1);
  CHECK(f["pid"] == pid);
  CHECK_THAT(f["reason"].get<std::string>(), Catch::Contains("signal 11 (SIGSEGV)"));
  const auto report = f["report"].get<std::string>();
  CHECK_THAT(report, Catch::Contains("last lines of its output:") &&
                         Catch::Contains("cohort-worker: rank 1 of job " + id.substr(0, id.find(' '))) &&
                         Catch::Contains("native stack trace:") &&
                         Catch::Contains("cohort-worker: fatal signal 11 (SIGSEGV)") &&
                         Catch::Contains("cohort-worker("));
  auto text = c.submit({"status", id});
  CHECK_THAT(text.out, Catch::Contains("crash report of attempt 1, rank 1 (pid " + std::to_string(pid) + ")") &&
                           Catch::Contains("    native stack trace:"));
}

// ---- Preemption: SIGTERM to a cluster-worker, submit drain / undrain ----

namespace {

// Polls `submit list --json` until pred holds for its "nodes"; returns them, or throws with the
// last answer.
json wait_for_nodes(test_cluster& c, const std::function<bool(const json&)>& pred,
                    std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  json last;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = c.submit({"list", "--json"});
    if (r.exit_code == 0) {
      last = json::parse(r.out)["nodes"];
      if (pred(last)) return last;
    }
    std::this_thread::sleep_for(200ms);
  }
  throw std::runtime_error("the nodes did not reach the awaited state; last list: " + last.dump());
}

// The node named `name` in a node list, or null.
json node_named(const json& nodes, const std::string& name) {
  for (const auto& n : nodes)
    if (n["name"] == name) return n;
  return nullptr;
}

bool registered(const json& nodes, std::initializer_list<const char*> names) {
  return std::all_of(names.begin(), names.end(),
                     [&](const char* n) { return !node_named(nodes, n).is_null(); });
}

// The end of a job "spot" held before step 5 whose node n2 (rank 1's) was preempted: released, it
// saves step 5, is stopped, and resumes after it on n1 and n3, a preemption and not a failure, with
// every step once; n2 leaves once its worker stopped.
void check_resumed_after_emergency_checkpoint(test_cluster& c, const std::string& id,
                                              cohort::test::running_process& n2) {
  const auto s = succeeded_unfailed(c, id, 2, 1);
  CHECK(s["rank_nodes"] == json::array({"n1", "n3"}));
  CHECK(s["step"] == 24);
  const std::string run_dir = c.dir().str() + "/runs/spot";
  CHECK(::access((run_dir + "/checkpoints/step-00000005/COMMITTED").c_str(), F_OK) == 0);
  const auto logs = c.submit({"logs", id}).out;
  CHECK_THAT(logs, Catch::Contains("preempted: emergency checkpoint of step 5 committed"));
  CHECK_THAT(logs, Catch::Contains("resuming after step 5"));
  // No step lost nor run twice in the metrics: 1..24 once each.
  int expected = 1;
  for (const auto& j : cohort::test::read_json_lines(run_dir + "/metrics.jsonl"))
    CHECK(j["step"] == expected++);
  CHECK(expected == 25);
  const auto status = c.submit({"status", id}).out;
  CHECK_THAT(status, Catch::Contains("failures 0, preemptions 1"));
  // The node left once its worker stopped.
  REQUIRE(n2.wait_for_exit(60s));
  CHECK_THAT(n2.output(), Catch::Contains("node n2 drained: exiting"));
}

}  // namespace

namespace {

// A head and nodes n1 and n2 of one CPU each, both registered, and the tiny data set: n2 (the
// node these tests preempt) and the data set's directory.
struct two_nodes {
  cohort::test::running_process& n2;  // n1 is never signalled
  std::string data;
};
two_nodes two_nodes_and_data(test_cluster& c) {
  c.start_head();
  c.start_worker("n1", 1);
  auto& n2 = c.start_worker("n2", 1);
  wait_for_nodes(c, [](const json& n) { return registered(n, {"n1", "n2"}); }, 60s);
  return {n2, cohort::test::make_tiny_dataset(c.dir().str() + "/data")};
}

}  // namespace

TEST_CASE(
    "SIGTERM to the cluster-worker of rank 1 saves an emergency checkpoint at the held step and "
    "the job resumes there on the other nodes, a preemption and not a failure",
    "[cluster][ckpt][preempt]") {
  test_cluster c;
  auto [n2, data] = two_nodes_and_data(c);
  // every_steps 0: the only checkpoints are the emergency one and the final one. max_failures 0:
  // a preemption counted as a failure would end the job.
  auto spec = json::parse(holding(tiny_llama_job("spot", data, c.dir().str() + "/runs", 0), 5));
  spec["run"]["failure"]["max_failures"] = 0;
  // The test releases the hold after the notice; no grace deadline may race it on a slow machine.
  spec["run"]["failure"]["preemption_grace_s"] = 600;
  const auto id = start_job(c, c.write_job(spec.dump()));
  const auto held = c.wait_for(id, [](const json& s) { return held_before(s, 5); }, 120s);
  REQUIRE(held["rank_nodes"] == json::array({"n1", "n2"}));
  c.start_worker("n3", 1);
  wait_for_nodes(c, [](const json& n) { return registered(n, {"n1", "n2", "n3"}); }, 60s);

  n2.kill(SIGTERM);
  // The node is draining and the job is being preempted; held, it saves nothing yet.
  const auto preempting = c.wait_for(id, [](const json& s) {
    return s["reason"].get<std::string>().rfind("preempting attempt 1: node n2 is leaving", 0) == 0;
  }, 60s);
  CHECK(preempting["state"] == "RUNNING");
  const auto nodes = wait_for_nodes(c, [](const json& n) {
    return node_named(n, "n2")["drain_state"] == "preempted";
  }, 60s);
  CHECK(node_named(nodes, "n1")["drain_state"] == "");
  CHECK_THAT(c.submit({"list"}).out, Catch::Contains("node n2 (127.0.0.1): draining (it got SIGTERM"));
  // Released, it runs step 5, saves it, and is stopped there; the next attempt resumes after it.
  release(c, id);
  check_resumed_after_emergency_checkpoint(c, id, n2);
}

namespace {

// Job "spot" (tiny Llama, checkpoints every `every` steps, max_failures 0, grace 600 s: the
// release, not a deadline, moves it on) held before step 5 on n1 and n2, whose cluster-worker
// watches AWS notices at `imds` every 50 ms (the endpoint moved as the AWS SDKs allow; `env`: more
// of its environment); then n3 joins. The job's id and n2.
std::pair<std::string, cohort::test::running_process*> spot_job_held_at_5(
    test_cluster& c, const cohort::test::fake_metadata_server& imds, int every,
    std::map<std::string, std::string> env) {
  c.start_head();
  c.start_worker("n1", 1);
  env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds.origin();
  auto& n2 = c.start_worker("n2", 1, "", {"--preemption-notice", "aws", "--preemption-poll-interval", "0.05"},
                            "", env);
  n2.wait_for_line("watches", 30s);
  wait_for_nodes(
      c,
      [](const json& n) {
        return registered(n, {"n1", "n2"});
      },
      60s);
  const auto data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  auto spec = json::parse(holding(tiny_llama_job("spot", data, c.dir().str() + "/runs", every), 5));
  spec["run"]["failure"]["max_failures"] = 0;
  spec["run"]["failure"]["preemption_grace_s"] = 600;
  const auto id = start_job(c, c.write_job(spec.dump()));
  const auto held = c.wait_for(
      id, [](const json& s) { return held_before(s, 5); }, 120s);
  REQUIRE(held["rank_nodes"] == json::array({"n1", "n2"}));
  c.start_worker("n3", 1);
  wait_for_nodes(
      c,
      [](const json& n) {
        return registered(n, {"n1", "n2", "n3"});
      },
      60s);
  return {id, &n2};
}

}  // namespace

TEST_CASE(
    "an AWS spot interruption notice in the instance metadata drains the cluster-worker of rank 1 "
    "as SIGTERM does: an emergency checkpoint at the held step, and the job resumes on the other nodes",
    "[cluster][ckpt][preempt][notice]") {
  test_cluster c;
  cohort::test::fake_metadata_server imds;  // the instance metadata of n2's VM
  const auto spot = spot_job_held_at_5(c, imds, 0, {});
  const auto& id = spot.first;
  auto& n2 = *spot.second;
  CHECK_THAT(n2.output(),
             Catch::Contains("node n2 watches AWS spot interruption notices at " + imds.origin() +
                             "/latest/meta-data/spot/instance-action every 0.05 s"));
  // Before the notice the endpoint answered 404 (asked with a token): nothing drains.
  REQUIRE(imds.wait_for_requests("/latest/meta-data/spot/instance-action", 3, 60s));
  CHECK(node_named(json::parse(c.submit({"list", "--json"}).out)["nodes"], "n2")["drain_state"] == "");
  CHECK(imds.refused() == 0);

  const auto time = "2099-01-01T00:00:00Z";  // far enough that the node's own deadline never ends it
  imds.set_aws_notice("terminate", time);
  const auto preempting = c.wait_for(
      id,
      [](const json& s) {
        return s["reason"].get<std::string>().rfind("preempting attempt 1: node n2 is leaving", 0) == 0;
      },
      60s);
  CHECK_THAT(preempting["reason"].get<std::string>(),
             Catch::Contains("the cloud's preemption notice: AWS spot interruption notice: terminate at " +
                             std::string(time)));
  CHECK_THAT(
      n2.wait_for_line("got the cloud's preemption notice", 30s),
      Catch::Contains("node n2 got the cloud's preemption notice (AWS spot interruption notice: terminate "
                      "at 2099-01-01T00:00:00Z): draining"));
  release(c, id);
  check_resumed_after_emergency_checkpoint(c, id, n2);
}

namespace {

// "YYYY-MM-DDTHH:MM:SSZ", `from_now` from now, as AWS writes an instance-action's time.
std::string utc_in(std::chrono::seconds from_now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now() + from_now);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return out;
}

}  // namespace

TEST_CASE(
    "a preempted job saves its emergency checkpoint only when the last save, as long as it took, "
    "ends before the notice's deadline; else it keeps its last checkpoint and says why with the numbers",
    "[cluster][ckpt][preempt][notice]") {
  test_cluster c;
  cohort::test::fake_metadata_server imds;
  // Rank 1's saves on n2 are recorded 100 s longer than they take: the estimate is over 100 s.
  // Checkpoints at steps 2 and 4.
  const auto spot = spot_job_held_at_5(c, imds, 2, {{"COHORT_TEST_SAVE_SECONDS_ADDED", "100"}});
  const auto& id = spot.first;
  auto& n2 = *spot.second;
  // Step 4's checkpoint (committed in the background; the held report may predate it) is the
  // save the estimate starts from.
  const auto step4 = c.dir().str() + "/runs/spot/checkpoints/step-00000004/COMMITTED";
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       ::access(step4.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(100ms);
  REQUIRE(::access(step4.c_str(), F_OK) == 0);

  SECTION("a notice 60 s away: no emergency checkpoint; the job resumes from step 4") {
    imds.set_aws_notice("terminate", utc_in(60s));
    c.wait_for(
        id,
        [](const json& s) {
          return s["reason"].get<std::string>().find(
                     "(the notice's deadline, before run.failure.preemption_grace_s 600 s)") !=
                 std::string::npos;
        },
        60s);
    release(c, id);
    // The attempt is stopped at once (not at the deadline); the next one holds before step 5 again.
    const auto again = c.wait_for(
        id, [](const json& s) { return held_before(s, 5, 2); }, 120s);
    CHECK(again["preemptions"] == 1);
    CHECK(again["checkpoint_step"] == 4);
    CHECK(again["rank_nodes"] == json::array({"n1", "n3"}));
    const std::string declined = "no emergency checkpoint: it would take about 10";  // 100 s and more
    const auto logs = c.submit({"logs", id}).out;
    CHECK_THAT(logs, Catch::Contains("preempted: " + declined) &&
                         Catch::Contains("s are left before the deadline (less a 5.0 s margin)") &&
                         Catch::Contains("on rank 1), but ") &&
                         Catch::Contains("the job keeps checkpoint step 4") &&
                         Catch::Contains("resuming after step 4"));
    bool said = false;  // the job's reason once the attempt ended, in its history
    for (const auto& e : cohort::test::read_json_lines(c.store() + "/jobs/" + id + "/events.jsonl")) {
      const auto reason = e.value("reason", "");
      said = said || (reason.find("attempt 1 preempted (node n2 is leaving (the cloud's preemption notice") !=
                          std::string::npos &&
                      reason.find(declined) != std::string::npos &&
                      reason.find("the job keeps checkpoint step 4; restarting") != std::string::npos);
    }
    CHECK(said);
    release(c, id);
    const auto s = c.wait_for(
        id, [](const json& s) { return is_terminal_state(s); }, 180s);
    INFO(s.dump());
    REQUIRE(s["state"] == "SUCCEEDED");
    CHECK(::access((c.dir().str() + "/runs/spot/checkpoints/step-00000005").c_str(), F_OK) != 0);
    REQUIRE(n2.wait_for_exit(60s));
  }
  SECTION("a notice an hour away: the grace (600 s) is the deadline, and the checkpoint is saved") {
    imds.set_aws_notice("terminate", utc_in(3600s));
    c.wait_for(
        id,
        [](const json& s) {
          return s["reason"].get<std::string>().rfind("preempting attempt 1: node n2 is leaving", 0) == 0;
        },
        60s);
    release(c, id);
    check_resumed_after_emergency_checkpoint(c, id, n2);
    // About 100 s against up to 600 s left (the grace, less the moment since the notice).
    const auto logs = c.submit({"logs", id}).out;
    const std::regex saving(
        R"(preempted: saving an emergency checkpoint: about 10\d\.\d s \(a step of [0-9.]+ s, )"
        R"(then the last save's 10\d\.\d s for [0-9.]+ MiB on rank 1\), (\d+)\.\d s left before )"
        R"(the deadline)");
    std::smatch m;
    REQUIRE(std::regex_search(logs, m, saving));
    CHECK(std::stoi(m[1]) >= 500);
    CHECK(std::stoi(m[1]) <= 600);
  }
}

TEST_CASE(
    "an Azure Preempt event for the node's VM drains it and is approved once the node drained, while "
    "a node whose metadata endpoint is down warns and keeps its place",
    "[cluster][preempt][notice]") {
  cohort::test::fake_metadata_server azure;
  azure.set_azure_vm_name("vm-n2");
  int down_port = 0;
  {
    cohort::test::fake_metadata_server gone;  // held a port a moment: nothing listens there now
    down_port = gone.port();
  }
  test_cluster c;
  c.start_head();
  auto& n2 = c.start_worker("n2", 1, "",
                            {"--preemption-notice", azure.origin() + "/metadata/scheduledevents",
                             "--preemption-poll-interval", "0.05"});
  auto& n3 = c.start_worker("n3", 1, "", {"--preemption-notice", "gcp", "--preemption-poll-interval", "0.05"},
                            "", {{"GCE_METADATA_HOST", "127.0.0.1:" + std::to_string(down_port)}});
  wait_for_nodes(
      c,
      [](const json& n) {
        return registered(n, {"n2", "n3"});
      },
      60s);
  CHECK_THAT(
      n3.wait_for_line("no notice is assumed", 30s),
      Catch::Contains("node n3: GCP preemption notices at http://127.0.0.1:" + std::to_string(down_port)) &&
          Catch::Contains("no answer"));
  REQUIRE(azure.wait_for_requests("/metadata/scheduledevents", 3, 60s));

  // Another VM's event is not this node's; its own is.
  azure.add_azure_event("other", "Preempt", {"vm-n9"}, "Sat, 01 Jan 2099 00:00:00 GMT");
  const int asked = azure.requests("/metadata/scheduledevents");
  REQUIRE(azure.wait_for_requests("/metadata/scheduledevents", asked + 3, 60s));
  CHECK(node_named(json::parse(c.submit({"list", "--json"}).out)["nodes"], "n2")["drain_state"] == "");
  azure.add_azure_event("spot-1", "Preempt", {"vm-n2"}, "Sat, 01 Jan 2099 00:00:00 GMT");
  CHECK_THAT(
      n2.wait_for_line("got the cloud's preemption notice", 30s),
      Catch::Contains("(Azure Scheduled Event Preempt (spot-1), not before Sat, 01 Jan 2099 00:00:00 GMT)"));
  REQUIRE(n2.wait_for_exit(60s));
  CHECK_THAT(n2.output(), Catch::Contains("node n2 drained: exiting"));
  REQUIRE(azure.wait_for_acknowledgement(30s));
  CHECK(azure.azure_acknowledged() == std::vector<std::string>{"spot-1"});
  CHECK(azure.refused() == 0);

  // The node whose endpoint never answered was never drained.
  const auto nodes = wait_for_nodes(
      c, [](const json& n) { return node_named(n, "n2").is_null(); }, 60s);
  CHECK(node_named(nodes, "n3")["drain_state"] == "");
  CHECK_FALSE(n3.ended());
  CHECK(n3.output().find("preemption notice (") == std::string::npos);
}

TEST_CASE("submit drain keeps a node out of placement until submit undrain, and a preemption beyond "
          "max_preemptions fails the job naming why",
          "[cluster][preempt]") {
  test_cluster c;
  c.start_head();
  c.start_worker("n1", 1);
  c.start_worker("n2", 1);
  wait_for_nodes(c, [](const json& n) { return registered(n, {"n1", "n2"}); }, 60s);

  const auto drained = c.submit({"drain", "n2"});
  INFO(drained.out << drained.err);
  REQUIRE(drained.exit_code == 0);
  CHECK_THAT(drained.out, Catch::Contains("node n2 drained: no new placement on it until `submit undrain n2`"));
  CHECK(node_named(json::parse(c.submit({"list", "--json"}).out)["nodes"], "n2")["drain_state"] == "drained");
  CHECK_THAT(c.submit({"list"}).out, Catch::Contains("drained (no new placement until `submit undrain n2`)"));

  auto spec = json::parse(holding(lr_job("spot", 2, 5, 0, -1, c.dir().str() + "/runs"), 2));
  spec["run"]["failure"]["max_preemptions"] = 0;
  const auto id = start_job(c, c.write_job(spec.dump()));
  const auto pending = c.wait_for(id, [](const json& s) { return s["state"] == "PENDING"; }, 60s);
  CHECK_THAT(pending["reason"].get<std::string>(), Catch::Contains("draining, so taking no new placement: n2 (drained)"));
  CHECK(pending["attempts"] == 0);

  const auto undrained = c.submit({"undrain", "n2"});
  INFO(undrained.out << undrained.err);
  REQUIRE(undrained.exit_code == 0);
  CHECK_THAT(undrained.out, Catch::Contains("node n2 is schedulable again"));
  const auto held = c.wait_for(id, [](const json& s) { return held_before(s, 2); }, 60s);
  CHECK(held["rank_nodes"] == json::array({"n1", "n2"}));

  // max_preemptions 0: the first preemption ends the job; no rank is blamed.
  const auto again = c.submit({"drain", "n2"});
  INFO(again.out << again.err);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.out, Catch::Contains("preempted (emergency checkpoint, then restart elsewhere): " + id));
  const auto failed = c.wait_for(id, [](const json& s) { return s["state"] == "FAILED"; }, 60s);
  CHECK(failed["preemptions"] == 1);
  CHECK(failed["failures"].empty());
  CHECK_THAT(failed["reason"].get<std::string>(),
             Catch::Contains("node n2 is drained on request (submit drain)") &&
                 Catch::Contains("preempted 1 times (failure.max_preemptions=0 exhausted)"));

  const auto unknown = c.submit({"drain", "n9"});
  CHECK(unknown.exit_code == 1);
  CHECK_THAT(unknown.err, Catch::Contains("no node named \"n9\" is registered (nodes: n1, n2)"));
  const auto not_drained = c.submit({"undrain", "n1"});
  CHECK(not_drained.exit_code == 1);
  CHECK_THAT(not_drained.err, Catch::Contains("node n1 is not draining"));
}

TEST_CASE("an elastic job whose node is preempted with no node to replace it goes on from its emergency "
          "checkpoint on the node that is left, with the same global batch",
          "[cluster][ckpt][preempt]") {
  test_cluster c;
  auto [n2, data] = two_nodes_and_data(c);
  auto spec = json::parse(holding(tiny_llama_job("shrinks", data, c.dir().str() + "/runs", 0), 5));
  spec["scaling"]["min_workers"] = 1;
  spec["run"]["failure"]["preemption_grace_s"] = 600;  // the release, not a deadline, moves it on
  const auto id = start_job(c, c.write_job(spec.dump()));
  const auto held = c.wait_for(id, [](const json& s) { return held_before(s, 5); }, 120s);
  REQUIRE(held["rank_nodes"] == json::array({"n1", "n2"}));
  n2.kill(SIGTERM);
  c.wait_for(id, [](const json& s) {
    return s["reason"].get<std::string>().rfind("preempting attempt 1", 0) == 0;
  }, 60s);
  release(c, id);
  const auto s = succeeded_unfailed(c, id, 2, 1);
  CHECK(s["rank_nodes"] == json::array({"n1"}));
  const auto logs = c.submit({"logs", id}).out;
  CHECK_THAT(logs, Catch::Contains("resuming after step 5"));
  CHECK_THAT(logs, Catch::Contains("rank 0/1 on node n1"));
  const std::string run_dir = c.dir().str() + "/runs/shrinks";
  int expected = 1;
  for (const auto& j : cohort::test::read_json_lines(run_dir + "/metrics.jsonl")) CHECK(j["step"] == expected++);
  CHECK(expected == 25);
  REQUIRE(n2.wait_for_exit(60s));
}

TEST_CASE("an elastic job shrunk by a preemption grows back to num_workers at its next restart once a "
          "node joins",
          "[cluster][ckpt][preempt]") {
  test_cluster c;
  auto [n2, data] = two_nodes_and_data(c);
  // Checkpoints every 2 steps; every attempt holds before step 5, after step 4's checkpoint.
  auto spec = json::parse(holding(tiny_llama_job("grows", data, c.dir().str() + "/runs", 2), 5));
  spec["scaling"]["min_workers"] = 1;
  spec["scaling"]["resize_interval_s"] = 3600;       // it grows at the crash's restart, not by itself
  spec["run"]["failure"]["preemption_grace_s"] = 0;  // stopped at the notice: resumes from step 4
  const auto id = start_job(c, c.write_job(spec.dump()));
  REQUIRE(c.wait_for(id, [](const json& s) { return held_before(s, 5); }, 120s)["rank_nodes"] ==
          json::array({"n1", "n2"}));
  n2.kill(SIGTERM);
  const auto shrunk = c.wait_for(id, [](const json& s) { return held_before(s, 5, 2); }, 120s);
  CHECK(shrunk["rank_nodes"] == json::array({"n1"}));
  CHECK(shrunk["preemptions"] == 1);
  CHECK_THAT(shrunk["reason"].get<std::string>(), Catch::Contains("all 1 workers running"));
  REQUIRE(n2.wait_for_exit(60s));

  c.start_worker("n3", 1);
  wait_for_nodes(c, [](const json& n) { return registered(n, {"n1", "n3"}); }, 60s);
  // The next restart (a crash of rank 0) takes both workers again.
  REQUIRE(::kill(c.worker_pid(id, 0, "n1"), SIGKILL) == 0);
  const auto grown = c.wait_for(id, [](const json& s) { return held_before(s, 5, 3); }, 120s);
  CHECK(grown["rank_nodes"] == json::array({"n1", "n3"}));
  CHECK(grown["checkpoint_step"] == 4);
  release(c, id);
  const auto s = c.wait_for(id, [](const json& s) { return is_terminal_state(s); }, 180s);
  INFO(s.dump());
  REQUIRE(s["state"] == "SUCCEEDED");
  CHECK(s["attempts"] == 3);
  CHECK(s["preemptions"] == 1);
  CHECK(s["failures"].size() == 1);
  const auto logs = c.submit({"logs", id}).out;
  CHECK_THAT(logs, Catch::Contains("rank 0/1 on node n1"));
  CHECK_THAT(logs, Catch::Contains("rank 1/2 on node n3"));
  int expected = 1;
  for (const auto& j : cohort::test::read_json_lines(c.dir().str() + "/runs/grows/metrics.jsonl"))
    CHECK(j["step"] == expected++);
  CHECK(expected == 25);
}

namespace {

// The sample log of an elastic run (run.sample_log; <run>/samples/rank-N.jsonl of `ranks` ranks):
// each step's surviving lines are those of the newest attempt that logged it, and their samples,
// rank after rank, are the step's global batch as the sampler gives it, whatever the world size
// of that attempt; so every step of 1..total_steps was trained once, on every sample of its batch
// once. The errors, none when it holds.
std::vector<std::string> elastic_sample_errors(const std::string& run_dir, const std::string& data, int ranks,
                                               std::int64_t global_batch, std::uint64_t seed,
                                               std::int64_t total_steps) {
  namespace cd = cohort::core::data;
  // step -> attempt -> rank -> samples
  std::map<std::int64_t, std::map<int, std::map<int, std::vector<std::int64_t>>>> logged;
  for (int rank = 0; rank < ranks; ++rank)
    for (const auto& line : cd::read_sample_log(run_dir + "/samples/rank-" + std::to_string(rank) + ".jsonl"))
      logged[line.step][line.attempt][rank] = line.samples;
  const cd::sampler sampler(static_cast<std::int64_t>(cd::dataset(data).size()), global_batch, seed);
  std::vector<std::string> errors;
  for (std::int64_t step = 1; step <= total_steps; ++step) {
    const auto it = logged.find(step);
    if (it == logged.end()) {
      errors.push_back("step " + std::to_string(step) + " is in no rank's sample log");
      continue;
    }
    const auto& [attempt, by_rank] = *it->second.rbegin();
    std::vector<std::int64_t> consumed;
    for (const auto& [rank, samples] : by_rank)
      consumed.insert(consumed.end(), samples.begin(), samples.end());
    if (consumed != sampler.step_samples(step - 1))
      errors.push_back("step " + std::to_string(step) + " (attempt " + std::to_string(attempt) + ", " +
                       std::to_string(by_rank.size()) +
                       " ranks) consumed other samples than its global batch");
  }
  if (!logged.empty() && logged.rbegin()->first != total_steps)
    errors.push_back("the sample log goes on to step " + std::to_string(logged.rbegin()->first));
  return errors;
}

}  // namespace

TEST_CASE(
    "an elastic job shrunk by a preemption grows back to num_workers by itself when a node joins: "
    "a checkpoint at its next step, a restart on both nodes that is neither a failure nor a "
    "preemption, and every step and sample once",
    "[cluster][ckpt][preempt][elastic]") {
  test_cluster c;
  auto [n2, data] = two_nodes_and_data(c);
  // No periodic checkpoints: the emergency one at step 5, the resize's at step 9, the final one.
  auto spec = json::parse(tiny_llama_job("regrows", data, c.dir().str() + "/runs", 0));
  spec["scaling"]["min_workers"] = 1;
  spec["scaling"]["resize_interval_s"] = 0;  // grows as soon as there is room
  spec["run"]["hold_before_steps"] = {5, 9, 13};
  spec["run"]["sample_log"] = true;
  spec["run"]["failure"]["max_failures"] = 0;          // a resize counted as a failure would end the job
  spec["run"]["failure"]["preemption_grace_s"] = 600;  // the release, not a deadline, moves it on
  const auto id = start_job(c, c.write_job(spec.dump()));
  REQUIRE(c.wait_for(
              id, [](const json& s) { return held_before(s, 5); }, 120s)["rank_nodes"] ==
          json::array({"n1", "n2"}));

  // Preempted at step 5, attempt 2 runs on n1 alone up to its hold before step 9.
  n2.kill(SIGTERM);
  c.wait_for(
      id, [](const json& s) { return s["reason"].get<std::string>().rfind("preempting attempt 1", 0) == 0; },
      60s);
  release(c, id);
  const auto shrunk = c.wait_for(
      id, [](const json& s) { return held_before(s, 9, 2); }, 120s);
  CHECK(shrunk["rank_nodes"] == json::array({"n1"}));
  CHECK(shrunk["preemptions"] == 1);
  REQUIRE(n2.wait_for_exit(60s));

  // n3 joins: the held attempt is asked to save after its next step, and grows once released.
  c.start_worker("n3", 1);
  const auto growing = c.wait_for(
      id,
      [](const json& s) {
        return s["reason"].get<std::string>().rfind("growing from 1 to 2 workers", 0) == 0;
      },
      60s);
  CHECK(growing["state"] == "RUNNING");
  CHECK_THAT(c.submit({"status", id}).out,
             Catch::Contains("growing from 1 to 2 workers: attempt 2 saves a checkpoint"));
  release(c, id);
  const auto grown = c.wait_for(
      id, [](const json& s) { return held_before(s, 13, 3); }, 120s);
  CHECK(grown["rank_nodes"] == json::array({"n1", "n3"}));
  CHECK(grown["checkpoint_step"] == 9);
  CHECK(grown["preemptions"] == 1);
  CHECK(grown["failures"].empty());
  release(c, id);

  succeeded_unfailed(c, id, 3, 1);
  bool resized = false;
  for (const auto& e : events_ending_in(c, id, "SUCCEEDED", 60s))
    resized = resized || (e["state"] == "RESTARTING" && e["reason"].get<std::string>().rfind(
                                                            "attempt 2 stopped to grow from 1 to 2 workers "
                                                            "(checkpoint at step 9; neither a failure nor a "
                                                            "preemption)",
                                                            0) == 0);
  CHECK(resized);
  const auto logs = c.submit({"logs", id}).out;
  CHECK_THAT(logs, Catch::Contains("rank 0/1 on node n1") && Catch::Contains("rank 1/2 on node n3") &&
                       Catch::Contains("resuming after step 9"));
  // The grow's save is said as a resize, not as a preemption (which the first restart was).
  CHECK_THAT(logs, Catch::Contains("resize: checkpoint requested: saving after step 9 (the job restarts on "
                                   "another number of workers: no further step)") &&
                       Catch::Contains("resize: checkpoint of step 9 committed"));
  CHECK_THAT(logs, !Catch::Contains("preempted: emergency checkpoint of step 9"));
  const std::string run_dir = c.dir().str() + "/runs/regrows";
  int expected = 1;
  for (const auto& j : cohort::test::read_json_lines(run_dir + "/metrics.jsonl"))
    CHECK(j["step"] == expected++);
  CHECK(expected == 25);
  // Global batch: 2 workers × micro_batch_size 2 × grad_accum 2; train.seed 3.
  const auto errors = elastic_sample_errors(run_dir, data, 2, 8, 3, 24);
  std::string all;
  for (const auto& e : errors) all += "\n  " + e;
  INFO("sample log:" << all);
  CHECK(errors.empty());
}

TEST_CASE(
    "a resize begun by a leader that is then killed is carried on by the standby that takes over: "
    "the adopted attempt saves, restarts on both nodes as a resize, neither a failure nor a "
    "preemption, and every step runs once",
    "[cluster][ckpt][elastic]") {
  test_cluster c;
  c.start_head();
  auto failover = start_failover_cluster(c, c.credentials(), 1);  // n1: one rank
  const auto data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  auto spec = json::parse(tiny_llama_job("regrows", data, c.dir().str() + "/runs", 0));
  spec["scaling"]["min_workers"] = 1;
  spec["scaling"]["resize_interval_s"] = 0;  // grows as soon as there is room
  spec["run"]["hold_before_steps"] = {3, 7};
  spec["run"]["failure"]["max_failures"] = 0;  // a resize counted as a failure would end the job
  const auto id = start_job(c, c.write_job(spec.dump()));
  REQUIRE(c.wait_for(
              id, [](const json& s) { return held_before(s, 3); }, 120s)["rank_nodes"] ==
          json::array({"n1"}));

  // n3 joins: the held attempt is asked to save after its next step; then the leader dies.
  cohort::test::running_process n3(node_args(c, "n3", failover.standby.both, c.credentials(), 1), {});
  n3.wait_for_line("joined the leader at " + c.address(), 60s);
  const auto growing = c.wait_for(
      id,
      [](const json& s) {
        return s["reason"].get<std::string>().rfind("growing from 1 to 2 workers", 0) == 0;
      },
      60s);
  CHECK(growing["phase"] == "resizing");
  CHECK(growing["phase_to"] == 2);
  c.kill_head();

  failover.standby.process->wait_for_line("serving on", 60s);
  failover.node->wait_for_line("joined the leader at " + failover.standby.address, 60s);
  n3.wait_for_line("joined the leader at " + failover.standby.address, 60s);
  const auto adopted = c.wait_for(
      id, [](const json& s) { return held_and_adopted(s, 3); }, 120s);
  CHECK(adopted["phase"] == "resizing");  // from the store
  release(c, id);
  const auto grown = c.wait_for(
      id, [](const json& s) { return held_before(s, 7, 2); }, 120s);
  CHECK(grown["rank_nodes"] == json::array({"n1", "n3"}));
  CHECK(grown["checkpoint_step"] == 3);
  CHECK(grown["resizes"] == 1);
  CHECK(grown["phase"] == "");
  release(c, id);
  succeeded_unfailed(c, id, 2, 0);
  CHECK_THAT(c.submit({"status", id}).out, Catch::Contains("failures 0, preemptions 0, grown back 1 time"));
  // Carried on, not begun again by the new leader (which would ask for another checkpoint).
  int begun = 0;
  for (const auto& e : events_ending_in(c, id, "SUCCEEDED", 60s))
    begun += e["reason"].get<std::string>().rfind("growing from 1 to 2 workers", 0) == 0 ? 1 : 0;
  CHECK(begun == 1);
  int expected = 1;
  for (const auto& j : cohort::test::read_json_lines(c.dir().str() + "/runs/regrows/metrics.jsonl"))
    CHECK(j["step"] == expected++);
  CHECK(expected == 25);
}

// ---- Fencing: epochs on commands, acknowledged logs and outcomes ----

namespace {

// How many times `text` occurs in `haystack`.
std::size_t occurrences(const std::string& haystack, const std::string& text) {
  std::size_t n = 0;
  for (auto at = haystack.find(text); at != std::string::npos; at = haystack.find(text, at + 1)) ++n;
  return n;
}

// `submit logs JOB` until its output holds `text`; the output.
std::string wait_for_log(test_cluster& c, const std::string& id, const std::string& text,
                         std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto r = c.submit({"logs", id});
    last = r.out + r.err;
    if (r.exit_code == 0 && r.out.find(text) != std::string::npos) return r.out;
    std::this_thread::sleep_for(200ms);
  }
  throw std::runtime_error("\"" + text + "\" never appeared in the logs of " + id + "; last: " + last);
}

// What the store holds of a job: its state, history and output files.
std::string job_files(test_cluster& c, const std::string& id) {
  std::string all;
  for (const char* name : {"state.json", "events.jsonl", "logs.jsonl"})
    all += std::string(name) + ":\n" + cohort::test::read_file(c.store() + "/jobs/" + id + "/" + name);
  return all;
}

}  // namespace

TEST_CASE("after kill -9 of the leader a standby on another host address takes over a held job, "
          "which finishes with every step once in one attempt, and what a worker printed while no "
          "leader was reachable is in submit logs once",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  auto failover = start_failover_cluster(c, c.credentials(), 2);
  auto& standby = failover.standby.process;
  auto& node = *failover.node;
  const auto standby_address = failover.standby.address, both = failover.standby.both;
  const auto runs = c.dir().str() + "/runs";
  // max_failures 0: a lost attempt would fail the job. The stopped rank below must not be judged
  // hung, nor the waiting one time out, within the test.
  const auto id = start_job(c, c.write_job(hang_job(
                                   "outage", 6, 3, runs,
                                   R"("max_failures": 0, "hang_timeout_s": 600, "collective_timeout_s": 900)")));
  c.wait_for(id, [](const json& s) { return held_before(s, 3); }, 60s);
  const int rank0 = c.worker_pid(id, 0, "n1");
  const int rank1 = c.worker_pid(id, 1, "n1");
  REQUIRE(::kill(rank0, SIGSTOP) == 0);
  REQUIRE(::kill(rank1, SIGSTOP) == 0);
  release(c, id);
  // The trainer passed the release on to the ranks (which cannot see it yet) while the leader lived.
  wait_for_log(c, id, "trainer: released attempt 1", 60s);
  c.kill_head();
  // Rank 0 goes on with no leader alive: it prints that it was released, then waits in step 3's
  // collective for rank 1, so the job cannot end before the new leader adopts it.
  REQUIRE(::kill(rank0, SIGCONT) == 0);
  standby->wait_for_line("serving on", 60s);
  node.wait_for_line("joined the leader at " + standby_address, 60s);
  c.wait_for(id, [](const json& s) {
    return s["state"] == "RUNNING" && s["reason"].get<std::string>().rfind("head restarted", 0) != 0;
  }, 120s);
  REQUIRE(::kill(rank1, SIGCONT) == 0);
  const auto done = c.wait_for(id, [](const json& s) {
    return s["state"] == "SUCCEEDED" || s["state"] == "FAILED";
  }, 120s);
  INFO(done.dump());
  CHECK(done["state"] == "SUCCEEDED");
  CHECK(done["attempts"] == 1);
  CHECK(done["failures"].empty());
  std::vector<std::int64_t> steps;
  for (const auto& m : cohort::test::read_json_lines(runs + "/outage/metrics.jsonl"))
    steps.push_back(m["step"].get<std::int64_t>());
  CHECK(steps == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6});
  const auto logs = c.submit({"logs", id}).out;
  INFO(logs);
  CHECK(occurrences(logs, "released: running step 3") == 1);  // written during the outage
  CHECK(occurrences(logs, "trainer: released attempt 1") == 1);
  CHECK(occurrences(logs, "rank 0 done") == 1);
  CHECK(occurrences(logs, "rank 1 done") == 1);
  CHECK(occurrences(logs, "held before step 3") == 1);
}

TEST_CASE("a SIGSTOPped leader woken after a standby took over steps down without writing to the "
          "store, and the job it ran finishes under the new leader alone",
          "[cluster]") {
  test_cluster c;
  c.start_head({"--step-down-grace", "0"});
  const int standby_port = cohort::test::free_port();
  const auto standby_address = "127.0.0.1:" + std::to_string(standby_port);
  auto standby = c.start_other_head(standby_port);
  standby->wait_for_line("waiting as a standby", 60s);
  c.use_address(c.address() + "," + standby_address);
  cohort::test::running_process node(
      node_n1_args(c, c.address() + "," + standby_address, c.credentials(), 2), {});
  node.wait_for_line("joined the leader at " + c.address(), 60s);
  wait_for_node(c, "n1", 60s);
  const auto id = start_job(c, c.write_job(holding(lr_job("fenced", 1, 6, 0, 0, c.dir().str() + "/runs"), 3)));
  c.wait_for(id, [](const json& s) { return held_before(s, 3); }, 60s);

  c.head().kill(SIGSTOP);
  adopted_and_finished(c, *standby, node, standby_address, id, 3);
  events_ending_in(c, id, "SUCCEEDED", 60s);  // the new leader's writes are made
  const auto before = job_files(c, id);
  // Woken, the old leader still has the node's silence, the job and its timers to act on; it
  // must find itself fenced first.
  c.head().kill(SIGCONT);
  c.head().wait_for_line("is stepping down", 60s);
  REQUIRE(c.head().wait_for_exit(60s));
  const auto out = c.head().output();
  INFO(out);
  CHECK_THAT(out, Catch::Contains("lost the leader lease") && !Catch::Contains("cannot record") &&
                      !Catch::Contains("was fenced"));
  CHECK(job_files(c, id) == before);
  // No split brain: the new leader serves the job as it ended.
  c.use_address(standby_address);
  CHECK(c.status(id)["state"] == "SUCCEEDED");
}

TEST_CASE("a head started with --port 0 publishes the port it bound in the leader record, where "
          "clients find it",
          "[cluster]") {
  test_cluster c;
  auto head = c.start_other_head(0);
  const auto line = head->wait_for_line("serving on", 60s);
  const auto from = line.find("serving on ") + 11;
  const auto served = line.substr(from, line.find(' ', from) - from);
  REQUIRE(served.rfind("127.0.0.1:", 0) == 0);
  CHECK(served != "127.0.0.1:0");
  cohort::core::store::leader_lease lease(c.store());
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  std::string published;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto l = lease.current()) published = l->address;
    if (published == served) break;
    std::this_thread::sleep_for(100ms);
  }
  CHECK(published == served);
  const auto r = c.submit({"list"}, {{"COHORT_ADDRESS", published}});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
}

TEST_CASE("a job that ends while no leader is reachable is taken as ended by the next leader, "
          "not restarted",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  auto failover = start_failover_cluster(c, c.credentials(), 1);
  auto& standby = failover.standby.process;
  const auto standby_address = failover.standby.address, both = failover.standby.both;
  const auto runs = c.dir().str() + "/runs";
  const auto id = start_job(c, c.write_job(holding(lr_job("ends", 1, 6, 0, 0, runs), 3)));
  c.wait_for(id, [](const json& s) { return held_before(s, 3); }, 60s);
  const int rank0 = c.worker_pid(id, 0, "n1");
  REQUIRE(::kill(rank0, SIGSTOP) == 0);
  release(c, id);
  wait_for_log(c, id, "trainer: released attempt 1", 60s);
  c.kill_head();
  // The rank runs its last steps and the attempt ends with the leader dead and its successor
  // still waiting for the lease to run out.
  REQUIRE(::kill(rank0, SIGCONT) == 0);
  standby->wait_for_line("serving on", 60s);
  const auto done = c.wait_for(id, [](const json& s) {
    return s["state"] == "SUCCEEDED" || s["state"] == "FAILED" || s["attempts"] != 1;
  }, 120s);
  INFO(done.dump());
  CHECK(done["state"] == "SUCCEEDED");
  CHECK(done["attempts"] == 1);
  CHECK(done["failures"].empty());
  CHECK(cohort::test::read_json_lines(runs + "/ends/metrics.jsonl").size() == 6);
  // The attempt ended after the old leader died (its rank was stopped until then): the new leader
  // (epoch 2) recorded the end from the outcome the trainer kept for it.
  const auto events = events_ending_in(c, id, "SUCCEEDED", 60s);
  CHECK(events.back()["epoch"] == 2);
  CHECK(occurrences(c.submit({"logs", id}).out, "rank 0 done") == 1);
}

TEST_CASE_METHOD(head_and_one_node, "a job with run.hold_before_steps holds before each of them, and each hold takes a release "
          "of its own",
          "[cluster]") {
  auto spec = json::parse(lr_job("stepped", 2, 8, 0, 0, c.dir().str() + "/runs"));
  spec["run"]["hold_before_steps"] = {2, 5};
  const auto id = start_job(c, c.write_job(spec.dump()));
  c.wait_for(id, [](const json& s) { return held_before(s, 2); }, 60s);
  release(c, id);
  const auto second = c.wait_for(id, [](const json& s) { return held_before(s, 5); }, 60s);
  CHECK(second["step"] == 4);
  release(c, id);
  const auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 60s);
  CHECK(s["step"] == 8);
  CHECK(s["attempts"] == 1);
}

TEST_CASE("rank 0 killed inside a checkpoint commit leaves a directory without COMMITTED that the "
          "restart never loads: it resumes from the checkpoint before and ends bitwise equal to a "
          "straight run",
          "[cluster][ckpt]") {
  test_cluster c;
  c.start_head();
  const std::string pause = c.dir().str() + "/pause";
  std::filesystem::create_directories(pause);
  // The node's workers inherit the pause point (test_hooks.hpp): a job spec cannot set it.
  cohort::test::running_process node({c.program("cluster-worker"), "--address", c.address(), "--credentials",
                                      c.credentials(), "--name", "n1", "--num-cpus", "2"},
                                     {{"COHORT_TEST_PAUSE_DIR", pause}});
  node.wait_for_line("joining", 30s);
  const auto data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  const auto job = [&](const std::string& name) { return tiny_llama_job(name, data, c.dir().str() + "/runs", 3); };
  auto straight = c.submit({"run", c.write_job(job("straight")), "--follow"});
  INFO(straight.out << straight.err);
  REQUIRE(straight.exit_code == 0);

  cohort::test::write_file(pause + "/commit-step-00000006.arm", "");
  const auto id = start_job(c, c.write_job(job("torn")));
  const std::string torn = c.dir().str() + "/runs/torn/checkpoints/step-00000006";
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (::access((pause + "/commit-step-00000006.paused").c_str(), F_OK) != 0) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(20ms);
  }
  // Every rank's files are there; the commit is not.
  CHECK(::access((torn + "/rank-00000.safetensors").c_str(), F_OK) == 0);
  CHECK(::access((torn + "/rank-00001.safetensors").c_str(), F_OK) == 0);
  CHECK(::access((torn + "/COMMITTED").c_str(), F_OK) != 0);
  const int pid = std::stoi(cohort::test::read_file(pause + "/commit-step-00000006.paused"));
  REQUIRE(::kill(pid, SIGKILL) == 0);
  std::filesystem::remove(pause + "/commit-step-00000006.arm");
  const auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  CHECK(s["attempts"] == 2);
  const auto logs = c.submit({"logs", id}).out;
  CHECK_THAT(logs, Catch::Contains("checkpoint " + torn + " skipped") &&
                       Catch::Contains("resuming from " + c.dir().str() + "/runs/torn/checkpoints/step-00000003"));
  CHECK(::access((torn + "/COMMITTED").c_str(), F_OK) == 0);  // written again by the restart
  CHECK(c.run("cohort-ckpt", {"verify", torn}).exit_code == 0);
  const std::string straight_dir = c.dir().str() + "/runs/straight/checkpoints/step-00000024/";
  for (const char* shard : {"rank-00000.safetensors", "rank-00001.safetensors"}) {
    INFO(shard);
    CHECK(cohort::test::read_file(c.dir().str() + "/runs/torn/checkpoints/step-00000024/" + shard) ==
          cohort::test::read_file(straight_dir + shard));
  }
}

TEST_CASE("a cluster-worker killed with kill -9 and restarted under the same name at once: the head "
          "counts the old process lost, and the job restarts on the new one",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  c.start_worker("a", 2);
  const auto id = start_job(c, c.write_job(holding(lr_job("reborn", 2, 6, 0, -1, c.dir().str() + "/runs"), 3)));
  c.wait_for(id, [](const json& s) { return held_before(s, 3); }, 60s);
  c.kill_worker_process("a");
  c.start_worker("a", 2);  // well within the 3 s heartbeat timeout on any machine that is not stalled
  // The first attempt's trainer and ranks died with the old process: without its loss the job
  // would stay RUNNING, held, with nothing left to release.
  c.wait_for(id, [](const json& s) { return held_before(s, 3, s["attempts"].get<int>()) && s["attempts"] >= 2; }, 120s);
  release(c, id);
  const auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  CHECK(s["step"] == 6);
  REQUIRE(s["failures"].size() >= 1);
  CHECK_THAT(s["failures"][0]["reason"].get<std::string>(), Catch::Contains("restarted") || Catch::Contains("lost"));
}

TEST_CASE("on an etcd store, after kill -9 of the leader head a standby head takes over from etcd "
          "and the running job finishes in its first attempt",
          "[cluster][etcd]") {
  cohort::test::etcd_cluster etcd(3);
  test_cluster c;
  c.use_etcd(etcd.location("/cluster-test"));
  c.start_head();
  auto failover = start_failover_cluster(c, c.credentials(), 2);
  auto& standby = failover.standby.process;
  auto& node = *failover.node;
  const auto standby_address = failover.standby.address, both = failover.standby.both;
  const auto id = start_job(
      c, c.write_job(holding(lr_job("on-etcd", 1, 6, 0, 0, c.dir().str() + "/runs"), 3)));
  c.wait_for(id, [](const json& s) { return held_before(s, 3); }, 60s);

  c.kill_head();  // kill -9: etcd expires its lease (3 s), the standby's acquire then wins
  adopted_and_finished(c, *standby, node, standby_address, id, 3);
  // The job's record lives in etcd, written by the new leader under its higher epoch.
  auto db = cohort::core::store::open_cluster_store(etcd.location("/cluster-test"));
  auto stored = db->load_job(id);
  REQUIRE(stored);
  REQUIRE(stored->state);
  CHECK((*stored->state)["epoch"] == db->lease().current_epoch());
  CHECK(db->lease().current()->address == standby_address);
}

namespace {

// Starts a head serving its dashboard on a free port; returns that port.
// Starts the head with its dashboard on any free port (and `extra` options); its port, from the
// line that says where it serves (`scheme`: https with a certificate).
int start_head_with_dashboard(test_cluster& c, std::vector<std::string> extra = {},
                              const std::string& scheme = "http") {
  extra.insert(extra.begin(), {"--dashboard-port", "0"});
  c.start_head(extra);
  const auto line = c.head().wait_for_line("dashboard on " + scheme + "://", 60s);
  const auto slash = line.find("/ and"), colon = line.rfind(':', slash);
  REQUIRE((slash != std::string::npos && colon != std::string::npos && slash > colon));
  return std::stoi(line.substr(colon + 1, slash - colon - 1));
}

// Debian's chromium, which the dashboard tests drive headless; the test fails saying how to get it.
std::string chromium_path() {
  const std::string chromium = "/usr/bin/chromium";
  INFO("the dashboard tests need Debian's chromium package (scripts/install-deps --tests installs it)");
  REQUIRE(std::filesystem::exists(chromium));
  return chromium;
}

// A self-signed certificate for 127.0.0.1 and its key, made by the openssl command in the test's
// directory as NAME.crt and NAME.key.
struct certificate_files {
  std::string cert, key;
};
certificate_files self_signed_certificate(test_cluster& c, const std::string& name) {
  const certificate_files f{c.dir().str() + "/" + name + ".crt", c.dir().str() + "/" + name + ".key"};
  cohort::test::running_process openssl(
      {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f.key, "-out", f.cert,
       "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"},
      {});
  REQUIRE(openssl.wait_for_exit(120s));
  INFO(openssl.output());
  REQUIRE(openssl.exit_code() == 0);
  return f;
}

}  // namespace

TEST_CASE("the head's metrics endpoint gives a scraper with the cluster's token the nodes, jobs and "
          "training gauges in Prometheus text, and refuses one without it",
          "[cluster][metrics]") {
  test_cluster c;
  const int port = start_head_with_dashboard(c);
  c.start_worker("n1", 2);
  const auto id = start_job(c, c.write_job(lr_job("scraped", 2, 4, 0, 0, c.dir().str() + "/runs")));
  const auto record = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  const auto token = first_line(c.submit({"metrics-token"}).out);
  CHECK(token.size() == 64);

  httplib::Client scraper("127.0.0.1", port);
  const auto refused = scraper.Get("/metrics");
  REQUIRE(refused);
  CHECK(refused->status == 401);
  const auto wrong = scraper.Get("/metrics", {{"Authorization", "Bearer " + std::string(64, '0')}});
  REQUIRE(wrong);
  CHECK(wrong->status == 401);
  const auto res = scraper.Get("/metrics", {{"Authorization", "Bearer " + token}});
  REQUIRE(res);
  REQUIRE(res->status == 200);
  INFO(res->body);
  // Every sample line: "name{labels} value".
  std::map<std::string, double> samples;
  std::istringstream lines(res->body);
  for (std::string l; std::getline(lines, l);) {
    if (l.empty() || l[0] == '#') continue;
    const auto space = l.rfind(' ');
    REQUIRE(space != std::string::npos);
    samples[l.substr(0, space)] = std::stod(l.substr(space + 1));
  }
  const std::string job = "job=\"" + id + "\",name=\"scraped\"";
  CHECK(samples.at("cohort_jobs{state=\"SUCCEEDED\"}") == 1);
  CHECK(samples.at("cohort_jobs{state=\"FAILED\"}") == 0);
  CHECK(samples.at("cohort_job_state{" + job + ",state=\"SUCCEEDED\"}") == 1);
  CHECK(samples.at("cohort_job_attempts{" + job + "}") == 1);
  CHECK(samples.at("cohort_train_step{" + job + "}") == 4);
  CHECK(samples.at("cohort_train_loss{" + job + "}") == Approx(record["loss"].get<double>()));
  CHECK(samples.count("cohort_train_lr{" + job + "}") == 1);
  CHECK(samples.at("cohort_nodes{drain_state=\"\"}") == 1);
  CHECK(samples.at("cohort_node_resource{node=\"n1\",resource=\"CPU\"}") == 2);
  CHECK(samples.at("cohort_head_epoch") >= 1);

  // The dashboard's JSON: the job's logged steps, and 404 for a job that does not exist.
  const auto history = scraper.Get("/api/jobs/" + id + "/history", {{"Authorization", "Bearer " + token}});
  REQUIRE(history);
  REQUIRE(history->status == 200);
  const auto points = json::parse(history->body)["points"];
  REQUIRE(points.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(points[i]["step"] == i + 1);
  CHECK(points[3]["loss"].get<double>() == Approx(record["loss"].get<double>()));
  const auto unknown = scraper.Get("/api/jobs/job-9999/history", {{"Authorization", "Bearer " + token}});
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  CHECK(scraper.Get("/api/cluster")->status == 401);
}

TEST_CASE_METHOD(head_and_one_node, "submit status shows the newest eval_loss and perplexity of a job with validation, as its "
          "metrics.jsonl logged them, and nothing of the kind without",
          "[cluster]") {
  const auto data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  const auto eval = cohort::test::make_tiny_dataset(c.dir().str() + "/eval");
  auto spec = json::parse(tiny_llama_job("validated", data, c.dir().str() + "/runs", 0));
  spec["data"]["eval"] = eval;
  spec["train"]["max_steps"] = 5;
  spec["train"]["eval_every"] = 2;  // steps 2, 4 and the last, 5
  const auto id = start_job(c, c.write_job(spec.dump()));
  const auto done = c.wait_for(id, [](const json& s) { return is_terminal_state(s); }, 300s);
  REQUIRE(done["state"] == "SUCCEEDED");
  const auto lines = cohort::test::read_json_lines(c.dir().str() + "/runs/validated/metrics.jsonl");
  REQUIRE(lines.size() == 5);
  const auto& last = lines.back();
  REQUIRE(last.contains("eval_loss"));
  CHECK(done["eval_step"] == 5);
  CHECK(done["eval_loss"].get<double>() == Approx(last["eval_loss"].get<double>()));
  CHECK(done["eval_perplexity"].get<double>() == Approx(last["eval_perplexity"].get<double>()));
  const auto text = c.submit({"status", id});
  INFO(text.out);
  std::ostringstream expected;
  expected << "eval_loss " << done["eval_loss"].get<double>() << " (perplexity "
           << done["eval_perplexity"].get<double>() << ") at step 5";
  CHECK_THAT(text.out, Catch::Contains(expected.str()));
  // Without data.eval there is no evaluation to show.
  spec = json::parse(tiny_llama_job("unvalidated", data, c.dir().str() + "/runs", 0));
  spec["train"]["max_steps"] = 2;
  const auto plain = start_job(c, c.write_job(spec.dump()));
  CHECK(c.wait_for(plain, [](const json& s) { return is_terminal_state(s); }, 300s)["eval_step"] == 0);
  CHECK_THAT(c.submit({"status", plain}).out, !Catch::Contains("eval_loss"));
}

TEST_CASE("the dashboard page, loaded in headless Chromium with the token, lists the nodes and the "
          "job and draws a point per logged step",
          "[cluster][metrics][dashboard]") {
  const auto chromium = chromium_path();
  test_cluster c;
  const int port = start_head_with_dashboard(c);
  c.start_worker("n1", 2);
  auto spec = json::parse(lr_job("charted", 2, 5, 0, 0, c.dir().str() + "/runs"));
  spec["run"]["memory_status_every_s"] = 30;  // a sample at each of the 5 logged steps (and maybe more)
  const auto id = start_job(c, c.write_job(spec.dump()));
  c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  const auto token = first_line(c.submit({"metrics-token"}).out);
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/#token=" + token + "&job=" + id;
  // Virtual time: the page's requests and first refresh complete before the DOM is dumped,
  // however slow the machine.
  const std::vector<std::string> common{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                        "--user-data-dir=" + c.dir().str() + "/chromium",
                                        "--virtual-time-budget=10000"};
  // Chromium's output (the DOM on stdout, its chatter on stderr), once it has ended.
  const auto chromium_run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), chromium);
    cohort::test::running_process p(args, {});
    REQUIRE(p.wait_for_exit(180s));
    return p.output();
  };
  auto dump_args = common;
  dump_args.insert(dump_args.end(), {"--dump-dom", url});
  const auto dom = chromium_run(dump_args);
  INFO(dom);
  CHECK_THAT(dom, Catch::Contains("data-state=\"loaded\""));
  CHECK_THAT(dom, Catch::Contains("id=\"node-n1\""));
  CHECK_THAT(dom, Catch::Contains("id=\"job-" + id + "\"") && Catch::Contains("data-state=\"SUCCEEDED\""));
  for (const char* metric : {"loss", "lr", "tokens_per_s", "mfu"})
    CHECK_THAT(dom, Catch::Contains("data-metric=\"" + std::string(metric) + "\" data-points=\"5\""));
  // The per-rank host memory chart draws the rows of both ranks' memory CSVs (at least one per
  // logged step each); the GPU chart stays hidden with nothing to draw on CPUs.
  std::size_t memory_rows = 0;
  for (int rank = 0; rank < 2; ++rank) {
    const auto csv = cohort::test::read_file(c.dir().str() + "/runs/charted/memory/rank-" + std::to_string(rank) + ".csv");
    memory_rows += static_cast<std::size_t>(std::count(csv.begin(), csv.end(), '\n')) - 1;  // less the header
  }
  CHECK(memory_rows >= 10);
  CHECK_THAT(dom, Catch::Contains("data-memory=\"rss_bytes\" data-points=\"" + std::to_string(memory_rows) + "\""));
  CHECK_THAT(dom, Catch::Contains("id=\"gpu-memory\" hidden"));
  CHECK_THAT(dom, Catch::Contains("rank 0 done"));  // the log tail
  // Without the token the page asks for one and shows no data.
  auto login_args = common;
  login_args.insert(login_args.end(), {"--dump-dom", "http://127.0.0.1:" + std::to_string(port) + "/"});
  const auto login = chromium_run(login_args);
  CHECK_THAT(login, Catch::Contains("data-state=\"login\"") && !Catch::Contains("id=\"job-" + id));
  // A screenshot of the page with the job, kept as the test's artifact.
  const std::string artifacts = c.program("..") + "/test-artifacts";
  std::filesystem::create_directories(artifacts);
  std::filesystem::remove(artifacts + "/dashboard.png");
  auto shot_args = common;
  shot_args.insert(shot_args.end(), {"--window-size=1400,1000", "--screenshot=" + artifacts + "/dashboard.png", url});
  INFO(chromium_run(shot_args));
  REQUIRE(std::filesystem::exists(artifacts + "/dashboard.png"));
  CHECK(std::filesystem::file_size(artifacts + "/dashboard.png") > 10000);
}

TEST_CASE(
    "with --dashboard-cert and --dashboard-key the dashboard and /metrics serve HTTPS alone: a client "
    "that trusts the certificate reads them with the token, the page loads in headless Chromium, and "
    "plain HTTP gets nothing",
    "[cluster][metrics][dashboard]") {
  const auto chromium = chromium_path();
  test_cluster c;
  const auto cert = self_signed_certificate(c, "dashboard");
  const int port =
      start_head_with_dashboard(c, {"--dashboard-cert", cert.cert, "--dashboard-key", cert.key}, "https");
  c.start_worker("n1", 2);
  const auto id = start_job(c, c.write_job(lr_job("secured", 2, 3, 0, 0, c.dir().str() + "/runs")));
  c.wait_for(
      id, [](const json& s) { return s["state"] == "SUCCEEDED"; }, 120s);
  const auto token = first_line(c.submit({"metrics-token"}).out);
  const httplib::Headers bearer{{"Authorization", "Bearer " + token}};

  httplib::SSLClient https("127.0.0.1", port);
  https.set_ca_cert_path(cert.cert.c_str());
  https.enable_server_certificate_verification(true);
  const auto refused = https.Get("/metrics");
  REQUIRE(refused);
  CHECK(refused->status == 401);
  const auto metrics = https.Get("/metrics", bearer);
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  CHECK_THAT(metrics->body, Catch::Contains("cohort_train_step{job=\"" + id + "\",name=\"secured\"} 3"));
  // A client that does not trust the certificate (the system's CAs alone) gets no answer.
  httplib::SSLClient untrusting("127.0.0.1", port);
  untrusting.enable_server_certificate_verification(true);
  CHECK_FALSE(untrusting.Get("/metrics", bearer));
  // Nor does plain HTTP on the same port.
  httplib::Client plain("127.0.0.1", port);
  plain.set_read_timeout(30, 0);
  const auto cleartext = plain.Get("/metrics", bearer);
  CHECK((!cleartext || cleartext->status != 200));

  const std::string url = "https://127.0.0.1:" + std::to_string(port) + "/#token=" + token + "&job=" + id;
  cohort::test::running_process browser(
      {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--ignore-certificate-errors",
       "--user-data-dir=" + c.dir().str() + "/chromium", "--virtual-time-budget=10000", "--dump-dom", url},
      {});
  REQUIRE(browser.wait_for_exit(180s));
  const auto dom = browser.output();
  INFO(dom);
  CHECK_THAT(dom, Catch::Contains("data-state=\"loaded\""));
  CHECK_THAT(dom, Catch::Contains("id=\"job-" + id + "\"") && Catch::Contains("data-state=\"SUCCEEDED\""));
}

TEST_CASE(
    "cluster-head exits 2 naming the options when --dashboard-cert comes without its key, or with a "
    "key that is not its own",
    "[cluster][dashboard]") {
  test_cluster c;
  const auto one = self_signed_certificate(c, "one");
  const auto other = self_signed_certificate(c, "other");
  const std::vector<std::string> head{"--store", c.store(), "--port", "0", "--dashboard-port", "0"};
  auto args = head;
  args.insert(args.end(), {"--dashboard-cert", one.cert});
  const auto alone = c.run("cluster-head", args);
  CHECK(alone.exit_code == 2);
  CHECK_THAT(alone.err, Catch::Contains("--dashboard-cert and --dashboard-key go together"));
  args = head;
  args.insert(args.end(), {"--dashboard-cert", one.cert, "--dashboard-key", other.key});
  const auto mismatched = c.run("cluster-head", args);
  CHECK(mismatched.exit_code == 2);
  CHECK_THAT(mismatched.err, Catch::Contains("cannot serve the dashboard over HTTPS with the certificate " +
                                             one.cert + " and the key " + other.key));
  args = head;
  args.insert(args.end(), {"--dashboard-cert", one.cert, "--dashboard-key", c.dir().str() + "/missing.key"});
  const auto missing = c.run("cluster-head", args);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err,
             Catch::Contains("--dashboard-key " + c.dir().str() + "/missing.key: not a readable file"));
}

TEST_CASE("on an etcd store, a node and submit given only the etcd endpoints find the leader head "
          "through etcd, and after kill -9 of the leader find the new one",
          "[cluster][etcd]") {
  cohort::test::etcd_cluster etcd(3);
  test_cluster c;
  const auto location = etcd.location("/find-leader");
  c.use_etcd(location);
  c.start_head();
  auto elsewhere = start_standby_elsewhere(c);
  auto& standby = elsewhere.process;
  // Credentials copied out of the keys dir; no head address anywhere: only etcd names the leader.
  const auto credentials = credentials_outside_store(c);
  const std::map<std::string, std::string> no_address{{"COHORT_ADDRESS", ""}, {"COHORT_CREDENTIALS", credentials}};
  auto via_etcd = [&](std::vector<std::string> args) {
    args.insert(args.end(), {"--store", location});
    return c.submit(args, no_address);
  };
  auto status_via_etcd = [&](const std::string& id, const std::function<bool(const json&)>& pred) {
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto r = via_etcd({"status", id, "--json"});
      last = r.out + r.err;
      if (r.exit_code == 0 && pred(json::parse(r.out))) return json::parse(r.out);
      std::this_thread::sleep_for(200ms);
    }
    FAIL("submit status --store " << location << " never answered as awaited; last: " << last);
    return json();
  };
  cohort::test::running_process node({c.program("cluster-worker"), "--store", location, "--credentials",
                                      credentials, "--name", "n1", "--num-cpus", "2"},
                                     no_address);
  node.wait_for_line("joined the leader at " + c.address(), 60s);
  const auto run = via_etcd({"run", c.write_job(holding(lr_job("found", 1, 6, 0, 0, c.dir().str() + "/runs"), 3))});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const auto id = first_line(run.out);
  status_via_etcd(id, [](const json& s) { return held_before(s, 3); });

  c.kill_head();  // kill -9: etcd expires its lease (3 s), the standby's acquire then wins
  standby->wait_for_line("serving on", 60s);
  node.wait_for_line("joined the leader at " + elsewhere.address, 60s);
  // Only the new leader is alive: an answer through etcd is its.
  status_via_etcd(id, [](const json& s) { return held_and_adopted(s, 3); });
  const auto released = via_etcd({"release", id});
  INFO(released.out << released.err);
  REQUIRE(released.exit_code == 0);
  const auto done = status_via_etcd(id, [](const json& s) { return s["state"] == "SUCCEEDED" || s["state"] == "FAILED"; });
  INFO(done.dump());
  CHECK(done["state"] == "SUCCEEDED");
  CHECK(done["attempts"] == 1);
  CHECK(done["rank_nodes"][0] == "n1");
}

TEST_CASE("submit and cluster-worker refuse a malformed etcd store location and an etcd store "
          "without credentials, naming the option",
          "[cluster][etcd]") {
  test_cluster c;
  const std::map<std::string, std::string> bare{{"COHORT_ADDRESS", ""}, {"COHORT_CREDENTIALS", ""}};
  const auto bad = c.submit({"list", "--store", "etcd://127.0.0.1:notaport"}, bare);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--store etcd://127.0.0.1:notaport") && Catch::Contains("allowed: etcd://HOST:PORT"));
  const auto no_keys = c.submit({"list", "--store", "etcd://127.0.0.1:2379"}, bare);
  CHECK(no_keys.exit_code == 2);
  CHECK_THAT(no_keys.err, Catch::Contains("holds no credentials") && Catch::Contains("--credentials FILE"));
  const auto node = c.run("cluster-worker", {"--store", "etcd://127.0.0.1:2379", "--name", "n1"}, bare);
  CHECK(node.exit_code == 2);
  CHECK_THAT(node.err, Catch::Contains("holds no credentials") && Catch::Contains("--credentials FILE"));
}

namespace {

// Waits until a process reached pause point `name` (test_hooks.hpp): its pid.
int wait_for_pause(const std::string& pause_dir, const std::string& name, std::chrono::seconds timeout) {
  const std::string paused = pause_dir + "/" + name + ".paused";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (::access(paused.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("no process reached pause point " + name + " in time");
    std::this_thread::sleep_for(20ms);
  }
  return std::stoi(cohort::test::read_file(paused));
}

// A head, node n1 whose workers inherit the pause points of <dir>/pause, and a tiny data set.
struct pausing_cluster {
  test_cluster c;
  std::string pause = c.dir().str() + "/pause";
  std::unique_ptr<cohort::test::running_process> node;
  std::string data;
  pausing_cluster() {
    c.start_head();
    std::filesystem::create_directories(pause);
    node = std::make_unique<cohort::test::running_process>(
        std::vector<std::string>{c.program("cluster-worker"), "--address", c.address(), "--credentials",
                                 c.credentials(), "--name", "n1", "--num-cpus", "2"},
        std::map<std::string, std::string>{{"COHORT_TEST_PAUSE_DIR", pause}});
    node->wait_for_line("joining", 30s);
    data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  }
};

// tiny_llama_job of `steps` steps with run.failure set to `failure` (without braces).
std::string tiny_llama_failing(const std::string& name, const std::string& data, const std::string& storage,
                               int steps, int every_steps, const std::string& failure) {
  auto text = tiny_llama_job(name, data, storage, every_steps);
  for (const auto& [from, to] : {std::pair<std::string, std::string>{R"("max_steps": 24)",
                                                                     R"("max_steps": )" + std::to_string(steps)},
                                 {R"("failure": {"max_failures": -1})", R"("failure": {)" + failure + "}"}}) {
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
  }
  return text;
}

}  // namespace

TEST_CASE("a job whose final checkpoint and export each take longer than run.failure.hang_timeout_s "
          "ends SUCCEEDED, and submit status shows the save meanwhile",
          "[cluster][ckpt]") {
  pausing_cluster paused;
  auto& c = paused.c;
  const auto& pause = paused.pause;
  const auto& data = paused.data;
  // Rank 1 is held inside its final save, then rank 0 inside the export, each until the trainer
  // has said that the phase outlasted the 3 s step allowance.
  cohort::test::write_file(pause + "/save-step-00000004-rank-1-attempt-1.arm", "");
  cohort::test::write_file(pause + "/export-step-00000004.arm", "");
  const auto id = start_job(c, c.write_job(tiny_llama_failing(
                                   "slow-save", data, c.dir().str() + "/runs", 4, 0,
                                   R"("max_failures": 0, "hang_timeout_s": 3, "collective_timeout_s": 60)")));
  wait_for_pause(pause, "save-step-00000004-rank-1-attempt-1", 120s);
  c.wait_for(id, [](const json& s) {
    return s.value("activity", "").find("saving checkpoint step 4: ") != std::string::npos;
  }, 60s);
  wait_for_log(c, id, "trainer: rank 1 has been saving checkpoint step 4", 60s);
  CHECK_THAT(c.submit({"status", id}).out, Catch::Contains("saving checkpoint step 4: "));
  std::filesystem::remove(pause + "/save-step-00000004-rank-1-attempt-1.arm");
  wait_for_pause(pause, "export-step-00000004", 120s);
  wait_for_log(c, id, "trainer: rank 0 has been exporting the model of step 4", 60s);
  std::filesystem::remove(pause + "/export-step-00000004.arm");
  const auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED" || s["state"] == "FAILED"; }, 120s);
  INFO(s.dump(2));
  CHECK(s["state"] == "SUCCEEDED");
  CHECK(s["attempts"] == 1);
  CHECK(s["failures"].empty());
  CHECK(s.value("activity", "x").empty());
  CHECK(::access((c.dir().str() + "/runs/slow-save/model/config.json").c_str(), F_OK) == 0);
}

TEST_CASE("a rank that stops writing inside its checkpoint save is named hung after "
          "run.failure.checkpoint_timeout_s, and the restarted attempt finishes",
          "[cluster][ckpt]") {
  pausing_cluster paused;
  auto& c = paused.c;
  const auto& pause = paused.pause;
  const auto& data = paused.data;
  cohort::test::write_file(pause + "/save-step-00000002-rank-1-attempt-1.arm", "");
  const auto id = start_job(c, c.write_job(tiny_llama_failing(
                                   "stuck-save", data, c.dir().str() + "/runs", 4, 2,
                                   R"("max_failures": 1, "hang_timeout_s": 3, "collective_timeout_s": 60,
                                      "checkpoint_timeout_s": 2)")));
  const int pid = wait_for_pause(pause, "save-step-00000002-rank-1-attempt-1", 120s);
  const auto failed = c.wait_for(id, [](const json& s) { return !s["failures"].empty(); }, 60s);
  std::filesystem::remove(pause + "/save-step-00000002-rank-1-attempt-1.arm");
  INFO(failed.dump(2));
  const auto& f = failed["failures"][0];
  CHECK(f["rank"] == 1);
  CHECK(f["hung"] == true);
  CHECK(f["pid"] == pid);
  CHECK_THAT(f["reason"].get<std::string>(),
             Catch::Contains("hung: rank 1 on node n1 (pid " + std::to_string(pid) + ")") &&
                 Catch::Contains("while saving checkpoint step 2: 0.0 of") &&
                 Catch::Contains("(run.failure.checkpoint_timeout_s 2.0 s)"));
  const auto s = c.wait_for(id, [](const json& s) { return s["state"] == "SUCCEEDED" || s["state"] == "FAILED"; }, 120s);
  INFO(s.dump(2));
  CHECK(s["state"] == "SUCCEEDED");
  CHECK(s["attempts"] == 2);
}

TEST_CASE_METHOD(head_and_one_node, "a worker process past its scaling.resources_per_worker.memory is killed by its node, and "
          "the failure names the limit and what it held; one within its limit runs to the end",
          "[cluster]") {
  const auto with_memory = [&](const std::string& name, const std::string& bytes, int hold) {
    auto text = lr_job(name, 1, 4, 0, 0, c.dir().str() + "/runs");
    const std::string cpu = R"({"CPU": 1})";
    const auto at = text.find(cpu);
    REQUIRE(at != std::string::npos);
    text.replace(at, cpu.size(), R"({"CPU": 1, "memory": )" + bytes + "}");
    return hold > 0 ? holding(text, hold) : text;
  };
  // 10 MB: less than any process holding libtorch; held before step 2, it cannot end first.
  const auto small = start_job(c, c.write_job(with_memory("small", "1e7", 2)));
  const auto failed = c.wait_for(small, [](const json& s) { return s["state"] == "FAILED"; }, 120s);
  INFO(failed.dump(2));
  REQUIRE(failed["failures"].size() == 1);
  CHECK_THAT(failed["failures"][0]["reason"].get<std::string>(),
             Catch::Contains("rank 0 on node n1 (pid ") &&
                 Catch::Contains("of host memory, over its scaling.resources_per_worker.memory of 0.01 GiB") &&
                 Catch::Contains("the process was killed"));
  // 8 GiB: the same job runs to its end under the watch, which logs what it saw.
  auto fits = c.submit({"run", c.write_job(with_memory("fits", "8e9", 0)), "--follow"});
  INFO(fits.out << fits.err);
  CHECK(fits.exit_code == 0);
  const auto id = first_line(fits.out);
  CHECK_THAT(c.submit({"logs", id}).out, Catch::Contains(": resident memory at most ") &&
                                             Catch::Contains(" of its limit 7.45 GiB (read every 100 ms)"));
}

namespace {

// What a peer-replica case takes away after step 6 is committed and replicated: rank 1's process
// (kill -9); that and the replicas on both nodes; or rank 1's whole node (its cluster-worker
// killed with kill -9, its memory with it), n3 with an empty memory joining to take its place.
enum class lost { rank, rank_and_replicas, node };

// Job `name` (tiny Llama, checkpoints every 6 steps, run.checkpoint.replicate, the sample log, then
// `changes` merged in) on nodes n1 and n2, which keep the replicas under <test dir>/memory/<node>,
// held before step 7 with step 6 replicated (and committed, unless `changes` say otherwise).
struct replicated_job {
  std::string id, memory, data;
  std::map<std::string, std::string> env;  // the nodes' (COHORT_REPLICA_DIR)
};
replicated_job held_replicated_job(test_cluster& c, const std::string& name,
                                   const json& changes = json::object()) {
  replicated_job j{"", c.dir().str() + "/memory", "", {}};
  j.env = {{"COHORT_REPLICA_DIR", j.memory}};
  c.start_head();
  for (const char* node : {"n1", "n2"}) c.start_worker(node, 1, "", {}, "", j.env);
  wait_for_nodes(c, [](const json& n) { return registered(n, {"n1", "n2"}); }, 60s);
  j.data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  auto spec = json::parse(holding(tiny_llama_job(name, j.data, c.dir().str() + "/runs", 6), 7));
  spec["run"]["checkpoint"]["replicate"] = true;
  spec["run"]["sample_log"] = true;
  spec.merge_patch(changes);
  j.id = start_job(c, c.write_job(spec.dump()));
  const auto held = c.wait_for(j.id, [](const json& s) { return held_before(s, 7); }, 120s);
  REQUIRE(held["rank_nodes"] == json::array({"n1", "n2"}));
  return j;
}

// Job "peers" (held_replicated_job) loses `what`. The restart, held before step 7 again, is
// released; the job must end SUCCEEDED after 2 attempts having trained every step and sample once,
// the memory of the nodes it ended on left empty. Its log.
std::string peer_job_losing(test_cluster& c, lost what) {
  const auto [id, memory, data, env] = held_replicated_job(c, "peers");
  const std::string run_dir = c.dir().str() + "/runs/peers";
  REQUIRE(::access((run_dir + "/checkpoints/step-00000006/COMMITTED").c_str(), F_OK) == 0);
  if (what == lost::rank_and_replicas)
    for (const char* node : {"n1", "n2"})
      for (const auto& job : std::filesystem::directory_iterator(memory + "/" + node))
        std::filesystem::remove_all(job.path());
  if (what == lost::node) {
    c.start_worker("n3", 1, "", {}, "", env);
    wait_for_nodes(c, [](const json& n) { return registered(n, {"n1", "n2", "n3"}); }, 60s);
    c.kill_worker_process("n2");
  } else {
    REQUIRE(::kill(c.worker_pid(id, 1, "n2"), SIGKILL) == 0);
  }
  const auto resumed = c.wait_for(id, [](const json& s) { return held_before(s, 7, 2); }, 120s);
  CHECK(resumed["checkpoint_step"] == 6);
  if (what == lost::node) CHECK(resumed["rank_nodes"] == json::array({"n1", "n3"}));
  release(c, id);
  const auto s = c.wait_for(id, [](const json& s) { return is_terminal_state(s); }, 180s);
  INFO(s.dump());
  REQUIRE(s["state"] == "SUCCEEDED");
  CHECK(s["attempts"] == 2);
  CHECK(elastic_sample_errors(run_dir, data, 2, 8, 3, 24).empty());
  for (const auto& node : s["rank_nodes"])
    CHECK(std::filesystem::is_empty(memory + "/" + node.get<std::string>()));
  return c.submit({"logs", id}).out;
}

// Each line of `expected`, {a, b, n}: `logs` holds n lines that contain both a and b.
void check_lines(const std::string& logs,
                 const std::vector<std::tuple<std::string, std::string, int>>& expected) {
  INFO(logs);
  for (const auto& [a, b, n] : expected) {
    INFO(a << " ... " << b);
    std::istringstream in(logs);
    int found = 0;
    for (std::string line; std::getline(in, line);)
      found += line.find(a) != std::string::npos && line.find(b) != std::string::npos;
    CHECK(found == n);
  }
}

}  // namespace

TEST_CASE("with peer replicas a rank killed with kill -9 after a committed checkpoint is restored from "
          "the nodes' memory, reading no checkpoint file from storage, and the job trains every sample once",
          "[cluster][ckpt][replicas]") {
  test_cluster c;
  check_lines(peer_job_losing(c, lost::rank),
              {{"resuming from", "step-00000006 from the nodes' memory", 1},
               {"restoring step 6 from", ": 0 bytes of checkpoint files read from storage", 2},
               {"restoring step 6 from storage", "", 0}});
}

TEST_CASE("with peer replicas a node lost with its memory is restored from its buddy's copy, sent over "
          "the network to the node that takes its place, reading no checkpoint file from storage",
          "[cluster][ckpt][replicas]") {
  test_cluster c;
  check_lines(
      peer_job_losing(c, lost::node),
      {{"from the nodes' memory", "over the network: rank 1 from rank 0", 1},
       {"rank 1: restoring step 6 from rank 0's copy", ": 0 bytes of checkpoint files read from storage", 1},
       {"rank 0: restoring step 6 from its node's memory", ": 0 bytes of checkpoint files read from storage",
        1}});
}

TEST_CASE("with peer replicas gone from both nodes a restart reads the committed checkpoint from storage "
          "and says so",
          "[cluster][ckpt][replicas]") {
  test_cluster c;
  check_lines(
      peer_job_losing(c, lost::rank_and_replicas),
      {{"peer replicas not used: no node of this attempt holds a copy of", "restoring from storage", 1},
       {"restoring step 6 from storage: ", "bytes of checkpoint files read from storage", 2}});
}

TEST_CASE(
    "with replicas every 2 steps and a checkpoint only at the end, a rank killed with kill -9 after a "
    "replica step is restored from it, reading no checkpoint file from storage, and ends bitwise equal "
    "to an uninterrupted run",
    "[cluster][ckpt][replicas]") {
  test_cluster c;
  const json shorter = {{"train", {{"max_steps", 10}}}};
  json changes = {{"run", {{"checkpoint", {{"every_steps", 0}, {"replicate_every", 2}}}}}};
  changes.merge_patch(shorter);
  const auto job = held_replicated_job(c, "between", changes);
  const std::string run_dir = c.dir().str() + "/runs/between";
  REQUIRE(!std::filesystem::exists(run_dir + "/checkpoints/step-00000006"));  // step 6 in memory only
  REQUIRE(::kill(c.worker_pid(job.id, 1, "n2"), SIGKILL) == 0);
  c.wait_for(
      job.id, [](const json& s) { return held_before(s, 7, 2); }, 120s);
  release(c, job.id);
  const auto s = c.wait_for(
      job.id, [](const json& s) { return is_terminal_state(s); }, 180s);
  INFO(s.dump());
  REQUIRE(s["state"] == "SUCCEEDED");
  CHECK(s["attempts"] == 2);
  check_lines(c.submit({"logs", job.id}).out, {{"resuming from replica step 6", "no committed checkpoint", 1},
                                               {"restoring replica step 6 from its node's memory",
                                                ": 0 bytes of checkpoint files read from storage", 2},
                                               {"restoring step ", "from storage: ", 0}});

  auto straight = json::parse(tiny_llama_job("straight", job.data, c.dir().str() + "/runs", 0));
  straight.merge_patch(shorter);
  const auto run = c.submit({"run", c.write_job(straight.dump()), "--follow"});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const auto losses = [](const std::string& dir) {
    std::vector<double> out;
    for (const auto& j : cohort::test::read_json_lines(dir + "/metrics.jsonl")) {
      REQUIRE(j["step"] == static_cast<int>(out.size()) + 1);  // step 7 on, logged again once
      out.push_back(j["loss"].get<double>());
    }
    return out;
  };
  const std::string straight_dir = c.dir().str() + "/runs/straight";
  CHECK(losses(run_dir).size() == 10);
  CHECK(losses(run_dir) == losses(straight_dir));
  CHECK(cohort::test::read_file(run_dir + "/model/model.safetensors") ==
        cohort::test::read_file(straight_dir + "/model/model.safetensors"));
}

TEST_CASE("a job with peer replicas that is stopped leaves none behind on its nodes", "[cluster][ckpt][replicas]") {
  test_cluster c;
  const auto job = held_replicated_job(c, "kept");
  const auto& id = job.id;
  const auto& memory = job.memory;
  for (const char* node : {"n1", "n2"}) REQUIRE_FALSE(std::filesystem::is_empty(memory + "/" + node));
  const auto stopped = c.submit({"stop", id});
  INFO(stopped.out << stopped.err);
  REQUIRE(stopped.exit_code == 0);
  c.wait_for(id, [](const json& s) { return s["state"] == "STOPPED"; }, 60s);
  // The head tells the nodes once the job is STOPPED; each removes the job's replicas.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while ((!std::filesystem::is_empty(memory + "/n1") || !std::filesystem::is_empty(memory + "/n2")) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  for (const char* node : {"n1", "n2"}) CHECK(std::filesystem::is_empty(memory + "/" + node));
}

// Runs the causal_lm workload the way workers do (ranks as threads, rendezvous through a TCP store
// server, the trainer's commands through one run_signals the test may drive) and reads back what a run leaves on disk: metrics.jsonl and checkpoint tensors.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"
#include "core/ckpt/reader.hpp"
#include "core/ckpt/reshard.hpp"
#include "core/comm/store_auth.hpp"
#include "core/comm/tcp_store_server.hpp"
#include "core/train/workload.hpp"
#include "tests/core/comm/rank_threads.hpp"
#include "tests/support/json_lines.hpp"

namespace cohort::test {

struct rank_run {
  std::vector<core::train::step_report> reports;
  std::vector<std::string> log;
};

struct run_options {
  int attempt = 0;
  // The run in S3 ("s3://BUCKET/PREFIX/<name>", see worker_context::remote_run); each rank then
  // gets its own local run directory, <run_dir>/node-<rank>, as if on a node of its own.
  std::string remote_run;
  const std::atomic<bool>* cancelled = nullptr;  // else signals->cancelled
  // Each rank as if on a node of its own ("node-<rank>"), else all on one node ("local").
  bool node_per_rank = false;
  // What the trainer's commands would set in a worker process (checkpoint requests, releases,
  // preemption), shared by every rank; null: the run's own, never signalled.
  core::train::run_signals* signals = nullptr;
  std::function<void(const core::train::step_report&)> on_report;  // rank 0's reports
  // One per rank (world_size of them), given to the ranks as a worker process gives its heartbeat
  // thread's: what each saves, commits and exports, with the bytes moved. Null: none.
  core::train::rank_activity* activities = nullptr;
  // Called on rank 0's thread after each of its reports, with the attempt's store (and its
  // secret), before on_report: to play a client of the store in the middle of a run.
  std::function<void(core::comm::tcp_store_server&, const std::string& secret,
                     const core::train::step_report&)>
      on_report_store;
};

inline std::vector<rank_result<rank_run>> run_workload(const config::job_spec& spec, const std::string& run_dir,
                                                       const run_options& options = {}) {
  const std::string secret = core::comm::make_store_secret();
  core::comm::tcp_store_server server("127.0.0.1", 0, secret);
  const int world = spec.scaling.num_workers;
  core::train::run_signals own_signals;
  core::train::run_signals* signals = options.signals ? options.signals : &own_signals;
  return run_ranks<rank_run>(world, [&](int rank) {
    core::train::worker_context ctx;
    ctx.spec = spec;
    ctx.job_id = "job-1";
    ctx.rank = rank;
    ctx.world_size = world;
    ctx.attempt = options.attempt;
    ctx.node = options.node_per_rank ? "node-" + std::to_string(rank) : "local";
    ctx.store_address = server.host() + ":" + std::to_string(server.port());
    ctx.store_secret = secret;
    ctx.run_dir = options.remote_run.empty() ? run_dir : run_dir + "/node-" + std::to_string(rank);
    ctx.remote_run = options.remote_run;
    ctx.cancelled = options.cancelled ? options.cancelled : &signals->cancelled;
    ctx.signals = signals;
    if (options.activities != nullptr) ctx.activity = &options.activities[rank];
    rank_run out;
    ctx.report = [&](const core::train::step_report& r) {
      out.reports.push_back(r);
      if (rank == 0 && options.on_report_store) options.on_report_store(server, secret, r);
      if (options.on_report) options.on_report(r);
    };
    ctx.log = [&](const std::string& line) { out.log.push_back(line); };
    core::train::make_workload(spec)->run(ctx);
    return out;
  });
}

// run_workload, cancelled once rank 0 reported step `stop_after`: a worker group killed there.
// Every rank ends with an error (cancelled_error) for the caller to check.
inline std::vector<rank_result<rank_run>> run_until_step(const config::job_spec& spec,
                                                         const std::string& run_dir, std::int64_t stop_after,
                                                         run_options o = {}) {
  std::atomic<bool> cancelled{false};
  o.cancelled = &cancelled;
  o.on_report = [&](const core::train::step_report& r) {
    if (r.step == stop_after) cancelled = true;
  };
  return run_workload(spec, run_dir, o);
}

// A run of `spec` killed once rank 0 reported step `stop_after` (run_until_step), then started
// again as attempt 1 and run to its end: each attempt's rank results.
struct killed_and_resumed {
  std::vector<rank_result<rank_run>> killed, resumed;
};
inline killed_and_resumed run_killed_and_resumed(const config::job_spec& spec, const std::string& run_dir,
                                                 std::int64_t stop_after) {
  killed_and_resumed out;
  out.killed = run_until_step(spec, run_dir, stop_after);
  run_options again;
  again.attempt = 1;
  out.resumed = run_workload(spec, run_dir, again);
  return out;
}

inline std::vector<nlohmann::json> metrics_lines(const std::string& run_dir) {
  return read_json_lines(run_dir + "/metrics.jsonl");
}

// Whether some line of a rank's log contains both a and b.
inline bool contains_line(const std::vector<std::string>& log, const std::string& a, const std::string& b) {
  for (const auto& line : log) {
    if (line.find(a) != std::string::npos && line.find(b) != std::string::npos) return true;
  }
  return false;
}

// Every logical tensor of a committed checkpoint, by name, as raw bytes.
inline std::map<std::string, std::string> checkpoint_tensors(const std::string& ckpt_dir) {
  auto m = core::ckpt::read_manifest(ckpt_dir);
  core::ckpt::reshard_reader reader(ckpt_dir, m);
  return reader.read_partition(1, 0);
}

// Two committed checkpoints' logical tensors compared: how many `a` holds, and the names of those
// that `b` lacks or holds other bytes of.
struct checkpoint_comparison {
  std::map<std::string, std::string> tensors;  // a's
  std::vector<std::string> differing;
};
inline checkpoint_comparison compare_checkpoints(const std::string& a, const std::string& b) {
  checkpoint_comparison out{checkpoint_tensors(a), {}};
  const auto other = checkpoint_tensors(b);
  for (const auto& [name, bytes] : out.tensors) {
    const auto it = other.find(name);
    if (it == other.end() || it->second != bytes) out.differing.push_back(name);
  }
  return out;
}

}  // namespace cohort::test

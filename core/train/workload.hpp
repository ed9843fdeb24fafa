// The workload interface: what a worker runs for its job. It keeps torch out of actors/: a worker
// actor builds a worker_context, calls run() on a thread it owns, and turns reports and the
// outcome into messages. Implementations live in core/train (linear_regression, causal_lm, which
// also runs reward_model).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "config/job_spec.hpp"
#include "core/train/rank_activity.hpp"

namespace cohort::core::train {

// A reward model's figures over the pairs of a step's global batch or of an evaluation
// (DeepSpeed-Chat's step 2 reports them): the fraction of pairs whose chosen text scored above the
// rejected one, and the mean scores of each side.
struct reward_metrics {
  double accuracy = 0;
  double chosen_mean = 0;
  double rejected_mean = 0;
};

// One logged step, as rank 0 reports it (other ranks report only their step, for liveness).
struct step_report {
  std::int64_t step = 0;         // 1-based global step just completed
  std::int64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double mfu = 0;                // 0 when unknown (CPU)
  std::int64_t checkpoint_step = 0;  // newest committed checkpoint rank 0 knows of (0: none)
  double step_seconds = 0;       // this rank's wall time of the step (0 when unknown)
  double optimizer_seconds = 0;  // of which the optimizer's update (see step_result)
  double host_update_seconds = 0;     // the overlapped host update's own time (see step_result)
  std::int64_t held_before_step = 0;  // the ranks wait before this step (run.hold_before_step; 0: not held)
  // train.eval_every: whether this step evaluated data.eval, its mean loss per label token and
  // exp of it. In metrics.jsonl, and through rank 0's progress report to the head (`submit
  // status` shows the newest).
  bool evaluated = false;
  double eval_loss = 0;
  double eval_perplexity = 0;
  // workload reward_model: the step's pairs (`reward`) and, when evaluated, data.eval's (the
  // loss fields are then the mean pairwise loss −log σ(chosen − rejected)). In metrics.jsonl as
  // accuracy, chosen_mean, rejected_mean and eval_accuracy, eval_chosen_mean, eval_rejected_mean.
  std::optional<reward_metrics> reward{};
  std::optional<reward_metrics> eval_reward{};
  // A preempted attempt's rank 0 saves no emergency checkpoint: why, with the numbers ("" else).
  std::string no_emergency_save{};
};

// What a rank is told while it runs, by whoever started it: in a cohort-worker process the
// reader thread of its command link (actors/worker_process_link.hpp) that decodes the trainer's
// commands, in tests the test itself. Every field is an atomic: one thread writes, the rank's
// thread reads between steps (and, for `cancelled`, in collective waits). The counts only rise.
struct run_signals {
  // Checkpoint requests (submit checkpoint, and each preemption) the attempt was told so far. Rank
  // 0 takes a new one before its next step (checkpointer::take_request); the step's all-reduce
  // makes every rank save after that step.
  std::atomic<std::int64_t> checkpoint_requests{0};
  // Releases so far: the n-th run.hold_before_step an attempt reaches waits for the n-th.
  std::atomic<std::int64_t> releases{0};
  // A node of the attempt is leaving. Set before the checkpoint request that comes with it, so
  // rank 0 that takes that request sees it; the step's all-reduce tells the other ranks.
  std::atomic<bool> preempted{false};
  // The preemption's deadline (unix ms; 0: none known), stored before `preempted`: rank 0 saves
  // the emergency checkpoint only when its estimate ends before it (emergency_save.hpp).
  std::atomic<std::int64_t> preempt_deadline_ms{0};
  // Stop now (the stop command, or SIGTERM); what worker_context::cancelled points to.
  std::atomic<bool> cancelled{false};
};

// Everything a workload needs to know about its place in the job. Owned by the worker; valid for
// the whole run() call.
struct worker_context {
  config::job_spec spec;
  std::string job_id;
  int rank = 0;
  int world_size = 1;
  int attempt = 0;               // 0 for the first attempt, +1 per restart of the group
  std::string node;              // name of the node this worker runs on
  std::string store_address;     // HOST:PORT of the rendezvous store the trainer serves
  std::string store_secret;      // its secret (raw bytes, comm::store_secret_bytes); never logged
  std::string node_address = "127.0.0.1";  // where this worker's peers reach it (Gloo)
  std::string run_dir;           // <storage_path>/<name>: metrics, checkpoints, exports
  // "s3://BUCKET/PREFIX/<name>" when run.storage_path is in S3: the checkpoints live there
  // (s3_checkpoints.hpp), and run_dir is then this worker's local directory, local_dir/<name>
  // (checkpoint staging, verified copies, metrics, the export before its upload). "" otherwise.
  std::string remote_run;
  const std::atomic<bool>* cancelled = nullptr;  // set when the worker must stop now
  // Checkpoint requests, releases and preemption (see run_signals); null: none ever come (a hold
  // of the spec then waits until cancelled).
  const run_signals* signals = nullptr;
  // When set, the workload stores each step it completes (1-based), logged or not: the rank's
  // progress, which its heartbeat carries to the trainer's hang detector.
  std::atomic<std::int64_t>* step_reached = nullptr;
  // When set, the workload keeps in it what it does besides its steps (saving, committing,
  // exporting, finished) and the bytes its checkpoint writes have reached, which the heartbeat
  // carries too (rank_activity.hpp).
  rank_activity* activity = nullptr;
  std::function<void(const step_report&)> report;  // called after each logged step
  std::function<void(const std::string&)> log;     // one line of worker output
};

// Thrown by a workload that noticed cancellation; not a failure of the job.
class cancelled_error : public std::runtime_error {
 public:
  cancelled_error() : std::runtime_error("cancelled") {}
};

// Thrown by a workload when the job's own input fails while the rank sets up, before its first
// step: a spec it cannot run, a data set that is not one or holds less than a global batch, a
// model config that cannot be built. No restart can fix it: the worker reports it as bad input
// and the head fails the job at once. Collective and other errors stay ordinary exceptions.
class bad_input_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class workload {
 public:
  virtual ~workload() = default;
  // Runs the job's training to completion on this rank. Throws on failure (the message becomes
  // the failure reason the job records), bad_input_error when the failure is the job's input
  // found at setup, and cancelled_error when ctx.cancelled was set.
  virtual void run(const worker_context& ctx) = 0;
};

// The workload for a job's spec (causal_lm: the training engine).
std::unique_ptr<workload> make_workload(const config::job_spec& spec);

}  // namespace cohort::core::train

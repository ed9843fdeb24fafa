// The actor protocol: plain records that describe jobs, nodes and attempts, and the messages
// (each exactly one struct). Each is declared once, with one field list (its inspect function)
// that drives CAF messages in-process and the msgpack wire between processes. Only CAF's tiny
// meta::type_name header is pulled in. The records shown as JSON (store records, `--json`, the
// worker's setup file) name their fields in the list (net/field_name.hpp) for
// net/json_inspector.hpp. Who sends what to whom:
//   client → head    submit_job → job_accepted | job_query → job_record | job_list_query → job_list
//                    stop_job → job_record | follow_job → job_record, then job_event…
//                    checkpoint_job → job_record | release_job → job_record
//                    logs_query → job_logs | follow_logs → followed_logs, then job_event…
//                    plan_request → plan_reply
//   node → head      node_hello (the head monitors the node)
//   head → node      start_trainer; the trainer → head: trainer_started (monitored)
//   trainer → node   start_worker; the worker → trainer: worker_started (monitored)
//   worker → trainer progress_report, rank_heartbeat, log_line, worker_finished
//   trainer → worker kill_hung_worker, worker_command (checkpoint, release, preempt, stop);
//                    the worker actor of a process passes each on as a codec frame on the
//                    process's command link (fd 4), whose reader thread sets its run_signals
//   worker process → its worker actor   process_progress, process_heartbeat, process_log,
//                    process_finished as codec frames on fd 3 (worker_process_link.hpp), turned
//                    into the messages above (the link's messages: worker_link_messages,
//                    below); each direction of that link opens with link_hello, its protocol
//                    version
//   trainer → head   attempt_running, progress_report, log_line, attempt_outcome
//   head → trainer, trainer → worker   stop_attempt
//   head → trainer   checkpoint_attempt, release_attempt, preempt_attempt, log_ack, outcome_ack
//   client → head    drain_node → drain_reply;  node → head   node_draining
//   (every head → node and head → trainer command carries the leader's epoch: epoch_fence.hpp)
//   (the failure drills of an embedded cluster are in-process only, never on the wire:
//   drill_messages.hpp)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "actors/job_spec_fields.hpp"
#include "core/train/rank_activity.hpp"
#include "net/field_name.hpp"
#include "net/wire_message.hpp"

namespace cohort::actors {

enum class job_state : std::uint8_t { pending, running, restarting, succeeded, failed, stopped };
constexpr job_state wire_enum_max(job_state) { return job_state::stopped; }

const char* to_string(job_state s);
bool is_terminal(job_state s);

// What kind of failure ended an attempt. retryable: a crash, kill -9, a lost node, a collective
// error, anything after training started (a restart may fix it). bad_input: the job's own input
// failed while a worker set up, before its first step (a data set that is not one, a model
// config that cannot be built, ...): no restart can fix it, so the head fails the job at once,
// whatever failure.max_failures says.
enum class failure_kind : std::uint8_t { retryable, bad_input };
constexpr failure_kind wire_enum_max(failure_kind) { return failure_kind::bad_input; }
inline const char* to_string(failure_kind k) {
  return k == failure_kind::bad_input ? "bad_input" : "retryable";
}
// The kind named by to_string; anything else (older records and lines have none) is retryable.
inline failure_kind failure_kind_from_string(const std::string& text) {
  return text == "bad_input" ? failure_kind::bad_input : failure_kind::retryable;
}

// Why an attempt ended: which rank on which node, and what happened. rank -1: the trainer itself
// or the whole node.
struct failure_cause {
  static constexpr std::uint32_t wire_id = 1;
  std::int32_t attempt = 0;
  std::int32_t rank = -1;
  std::string node;
  std::string reason;
  failure_kind kind = failure_kind::retryable;
  // A rank the trainer's hang detector found hung (its process was killed): its pid and the last
  // step it reached.
  bool hung = false;
  std::int64_t pid = 0;
  std::int64_t last_step = 0;
  // A worker process that died: its last log lines and, where it could write one, its native
  // stack trace (several lines; "" when there is nothing to tell).
  std::string report{};
};

// The head's view of one job; what `submit status` shows.
struct job_record {
  static constexpr std::uint32_t wire_id = 2;
  std::string id;
  std::string name;
  job_state state = job_state::pending;
  std::string reason;
  std::int32_t attempts = 0;  // attempts started (1 after the first start)
  std::vector<failure_cause> failures;
  std::string trainer_node;
  std::vector<std::string> rank_nodes;
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
  double loss = 0;
  std::int64_t checkpoint_step = 0;  // newest committed checkpoint (0: none)
  std::string spec_json;
  // The current attempt waits before this step for `submit release` (run.hold_before_step; 0:
  // not held).
  std::int64_t held_before_step = 0;
  // Per rank, the indices of its GPUs in its node's offered GPU list (empty: none); the current
  // attempt's, while it holds a placement.
  std::vector<std::vector<std::int32_t>> rank_gpus{};
  // Attempts ended by a preemption (a node of theirs drained); counted against
  // run.failure.max_preemptions, never against max_failures, and not listed in `failures`.
  std::int32_t preemptions = 0;
  // The newest evaluation (train.eval_every) of the job's current run: its step (0: none yet),
  // eval_loss and eval_perplexity.
  std::int64_t eval_step = 0;
  double eval_loss = 0;
  double eval_perplexity = 0;
  // The current attempt's activity besides its steps (progress_report::activity; "" none).
  std::string activity{};
  // The current attempt being stopped for what is not a failure, kept so that a head taking over
  // carries it on (head_state::restore): phase "" (none), "preempting" (a node of it leaves: an
  // emergency checkpoint asked for by phase_deadline_ms, unix ms, from node phase_node because
  // phase_why) or "resizing" (growing back to phase_to ranks: a checkpoint asked for, then a
  // restart on more workers). phase_checkpoint_before: the newest checkpoint or step reported
  // when it began (a newer checkpoint ends it).
  std::string phase{};
  std::int64_t phase_checkpoint_before = 0;
  std::int64_t phase_deadline_ms = 0;
  std::string phase_node{};
  std::string phase_why{};
  std::int32_t phase_to = 0;
  // Attempts ended to grow back onto more workers (scaling.resize_interval_s): counted as
  // neither failures nor preemptions.
  std::int32_t resizes = 0;
};

// A node as it registers: name and total resources ("GPU": how many it offers, and the tag
// "accelerator_type:<model>" = 1 when it offers any).
struct node_info {
  static constexpr std::uint32_t wire_id = 3;
  std::string name;
  std::map<std::string, double> resources;
  // Where the node's trainers and workers are reached by the other nodes' workers (rendezvous
  // store, Gloo); 127.0.0.1 for a cluster on one machine.
  std::string address = "127.0.0.1";
  std::int64_t gpu_memory_bytes = 0;  // the smallest offered GPU's memory
  std::string accelerator_type{};     // the offered GPUs' model ("NVIDIA H100 80GB HBM3")
  // How the node names offered GPU i to CUDA (its UUID, else its index); the head assigns
  // indices into this list. Shorter than resources["GPU"] when unknown: index i is named "i".
  std::vector<std::string> gpu_ids{};
  std::string gpu_note{};  // why it offers no GPUs ("" when it does, or when not known)
  // Set by the head, not the node: "" schedulable; "preempted" (the node announced that it
  // leaves, SIGTERM) or "drained" (`submit drain NODE`): no new placement on it.
  std::string drain_state{};
};

// What the head gives a trainer: one attempt of one job, placed. `spec` is the job's spec as the
// head parsed and validated it (fewer workers when the attempt runs short: scaling.min_workers).
struct trainer_setup {
  static constexpr std::uint32_t wire_id = 4;
  std::string job_id;
  config::job_spec spec;
  std::int32_t attempt = 0;
  std::string trainer_node;
  std::vector<std::string> rank_nodes;
  std::vector<std::vector<std::int32_t>> rank_gpus{};  // per rank: GPU indices on its node
};

// What a trainer gives a node to start one worker.
struct worker_setup {
  static constexpr std::uint32_t wire_id = 5;
  std::string job_id;
  config::job_spec spec;  // the attempt's (trainer_setup::spec)
  std::int32_t rank = 0;
  std::int32_t world_size = 1;
  std::int32_t attempt = 0;
  std::string node;
  std::string store_address;
  std::string node_address = "127.0.0.1";  // this worker's node, for its collective transport
  // Indices into the node's offered GPUs (node_info::gpu_ids) that this worker alone uses; the
  // node starts the worker with CUDA_VISIBLE_DEVICES naming exactly these (empty: none).
  std::vector<std::int32_t> gpus{};
  // The attempt's store secret (64 hex digits, see core/comm/store_auth.hpp): the worker proves
  // it to the trainer's store. It travels only trainer → node over the CURVE channel and from
  // node to worker process in the 0600 setup file; it is never logged.
  std::string store_secret{};
  // This worker among the job's ranks on its node: the local_rank-th of local_world, in rank order
  // (scaling.bind_cores_to_rank splits the node's CPUs so).
  std::int32_t local_rank = 0;
  std::int32_t local_world = 1;
};

// What a rank tells of one logged step (rank 0's carry the metrics): the one field list of a
// worker process's process_progress and of the progress_report its worker actor passes on.
struct step_progress {
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  std::int64_t checkpoint_step = 0;  // newest committed checkpoint (0: none yet)
  std::int64_t held_before_step = 0;  // the ranks wait before this step (0: not held)
  // train.eval_every: the step whose evaluation this report carries (this report's step when it
  // evaluated; 0: none), its eval_loss and eval_perplexity.
  std::int64_t eval_step = 0;
  double eval_loss = 0;
  double eval_perplexity = 0;
  // A preempted attempt's rank 0 saves no emergency checkpoint, and says why with the numbers
  // (the estimate, the time left before the deadline); "" otherwise. The head stops the attempt.
  std::string no_emergency_save{};
};

// A step report from a worker: its step_progress, stamped with where it came from.
struct progress_report : step_progress {
  static constexpr std::uint32_t wire_id = 6;
  std::string job_id;
  std::int32_t rank = 0;
  // The attempt whose rank 0 reported (the trainer stamps it): the head takes step and
  // checkpoint_step only from its job's current attempt, so a zombie attempt's report is ignored.
  std::int32_t attempt = 0;
  // What the ranks do besides their steps, as the trainer's hang detector sees it ("saving
  // checkpoint step 20: 41.0 of 79.0 GB"; "" while training): the trainer sends rank 0's newest
  // report again whenever it changes.
  std::string activity{};
};

// How an attempt ended, as the trainer tells the head.
struct attempt_outcome {
  static constexpr std::uint32_t wire_id = 7;
  std::string job_id;
  std::int32_t attempt = 0;
  bool succeeded = false;
  failure_cause cause;  // when !succeeded
};

// One line of worker output, prefixed with where it came from when shown.
struct log_line {
  static constexpr std::uint32_t wire_id = 8;
  std::string job_id;
  std::int32_t rank = 0;
  std::string node;
  std::int64_t pid = 0;
  std::string text;
  // Set by the trainer that forwards the line: its attempt, and the line's number in that
  // attempt's output (1, 2, …; 0: a line outside the sequence, stored as it comes). The trainer
  // keeps the unacknowledged lines (log_ack) and sends them again to every head that adopts it,
  // so what workers log while no leader is reachable reaches the next one; the head stores a
  // line only once per (job, attempt, seq). kept_from: the oldest line the trainer still kept
  // when it sent this one; the lines before it were acknowledged or dropped, and no head waits
  // for them (log_sequence.hpp).
  std::int32_t attempt = -1;
  std::uint64_t seq = 0;
  std::uint64_t kept_from = 0;
};

// What followers of a job receive: the record after a change, and optionally a line to show.
struct job_event {
  static constexpr std::uint32_t wire_id = 9;
  job_record record;
  std::string line;
};

// ---- Requests and replies of the actor protocol (every message is exactly one struct) ----

// A client submits a job spec; the reply is job_accepted or an error naming the bad field.
struct submit_job {
  static constexpr std::uint32_t wire_id = 20;
  std::string spec_json;
};
struct job_accepted {
  static constexpr std::uint32_t wire_id = 21;
  std::string job_id;
};
// Reply: job_record.
struct job_query {
  static constexpr std::uint32_t wire_id = 22;
  std::string job_id;
};
// Reply: job_list.
struct job_list_query {
  static constexpr std::uint32_t wire_id = 23;
  bool unused = false;
};
struct job_list {
  static constexpr std::uint32_t wire_id = 24;
  std::vector<job_record> jobs;
  std::vector<node_info> nodes{};  // the registered nodes, by name
};
// Reply: job_record after the stop.
struct stop_job {
  static constexpr std::uint32_t wire_id = 25;
  std::string job_id;
};
// Ask a running job for a checkpoint after its next step. Reply: job_record.
struct checkpoint_job {
  static constexpr std::uint32_t wire_id = 42;
  std::string job_id;
};
// Release a running job held at run.hold_before_step (or let its attempt pass that step when it
// gets there). Reply: job_record.
struct release_job {
  static constexpr std::uint32_t wire_id = 44;
  std::string job_id;
};
// Reply: job_record; then job_event messages until the job ends.
struct follow_job {
  static constexpr std::uint32_t wire_id = 26;
  std::string job_id;
};
// Reply: job_logs.
struct logs_query {
  static constexpr std::uint32_t wire_id = 27;
  std::string job_id;
};
struct job_logs {
  static constexpr std::uint32_t wire_id = 28;
  std::vector<log_line> lines;
};
// A job's output so far and then every later line, with none lost or repeated in between (what
// `submit logs -f` shows). Reply: followed_logs; then job_event messages until the job ends.
struct follow_logs {
  static constexpr std::uint32_t wire_id = 66;
  std::string job_id;
};
// The job's record and its stored output at the moment the follower was registered: the first
// job_event after it carries the first line logged after the last of `lines`.
struct followed_logs {
  static constexpr std::uint32_t wire_id = 67;
  job_record record;
  std::vector<log_line> lines;
};

// node → head: here I am (again). The head monitors the sender.
struct node_hello {
  static constexpr std::uint32_t wire_id = 30;
  node_info info;
};
// head → node: start the trainer of one attempt.
// Every head → node and head → trainer command carries `epoch`, the sending leader's lease
// epoch; a node refuses one older than the newest it has seen (actors/epoch_fence.hpp).
struct start_trainer {
  static constexpr std::uint32_t wire_id = 31;
  trainer_setup setup;
  std::int64_t epoch = 0;
};
// trainer → head: I run attempt `attempt` of `job_id` (the head monitors the sender).
struct trainer_started {
  static constexpr std::uint32_t wire_id = 32;
  std::string job_id;
  std::int32_t attempt = 0;
};
// trainer → node: start one worker; the node's worker introduces itself with worker_started.
struct start_worker {
  static constexpr std::uint32_t wire_id = 33;
  worker_setup setup;
};
// worker → trainer: rank `rank` is up (the trainer monitors the sender).
struct worker_started {
  static constexpr std::uint32_t wire_id = 34;
  std::string job_id;
  std::int32_t attempt = 0;
  std::int32_t rank = 0;
  std::int64_t pid = 0;
};
// worker → trainer: rank `rank` ended its run; ok false carries the reason and its kind.
struct worker_finished {
  static constexpr std::uint32_t wire_id = 35;
  std::string job_id;
  std::int32_t attempt = 0;
  std::int32_t rank = 0;
  bool ok = false;
  std::string reason;
  failure_kind kind = failure_kind::retryable;
  std::string report{};  // a process that died: its last lines and stack trace (failure_cause)
};
// What a rank does besides its steps, as its heartbeats carry it (core/train/rank_activity.hpp):
// its phase (core::train::rank_phase: 0 training, 1 saving, 2 committing, 3 exporting, 4
// finished), the step of the checkpoint or export, and the bytes written of it so far.
struct heartbeat_activity {
  std::int32_t phase = 0;
  std::int64_t step = 0;
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;
};
inline heartbeat_activity heartbeat_of(const core::train::activity_reading& a) {
  return {static_cast<std::int32_t>(a.phase), a.step, a.bytes_done, a.bytes_total};
}
inline core::train::activity_reading reading_of(const heartbeat_activity& a) {
  return {core::train::rank_phase_of(a.phase), a.step, a.bytes_done, a.bytes_total};
}
// worker → trainer: rank `rank` is alive at step `step` (the last it completed); it has waited in
// a collective for collective_wait_s seconds (< 0: it is not waiting). Sent every
// heartbeat_interval_s(run.failure.hang_timeout_s) for the trainer's hang detector.
struct rank_heartbeat {
  static constexpr std::uint32_t wire_id = 46;
  std::string job_id;
  std::int32_t attempt = 0;
  std::int32_t rank = 0;
  std::int64_t step = 0;
  double collective_wait_s = -1;
  heartbeat_activity activity{};
};
// trainer → worker: kill the process of a rank found hung (SIGKILL: a stopped process ignores
// SIGTERM until it is continued). The worker then reports how its process ended.
struct kill_hung_worker {
  static constexpr std::uint32_t wire_id = 47;
  std::string job_id;
  std::int32_t attempt = 0;
  std::int32_t rank = 0;
};
// trainer → head: every rank of the attempt is up.
struct attempt_running {
  static constexpr std::uint32_t wire_id = 36;
  std::string job_id;
  std::int32_t attempt = 0;
};
// → trainer or worker: end the attempt now (stop, or the group is torn down after a failure).
struct stop_attempt {
  static constexpr std::uint32_t wire_id = 37;
  std::string job_id;
  std::int32_t attempt = 0;
  std::string reason;
  std::int64_t epoch = 0;  // the head's (trainer → worker: the trainer passes its own on)
};
// head → trainer: the attempt saves a checkpoint after its next step.
struct checkpoint_attempt {
  static constexpr std::uint32_t wire_id = 43;
  std::string job_id;
  std::int32_t attempt = 0;
  std::int64_t epoch = 0;
};
// head → trainer: the attempt's ranks go on past run.hold_before_step.
struct release_attempt {
  static constexpr std::uint32_t wire_id = 45;
  std::string job_id;
  std::int32_t attempt = 0;
  std::int64_t epoch = 0;
};
// head → trainer: the head has taken the attempt's outcome; the trainer, which kept it (and sent
// it again to every head that adopted it since), ends.
struct outcome_ack {
  static constexpr std::uint32_t wire_id = 49;
  std::string job_id;
  std::int32_t attempt = 0;
  std::int64_t epoch = 0;
};
// head → trainer: the head has stored the attempt's output lines up to `seq` (log_line::seq);
// the trainer forgets them.
struct log_ack {
  static constexpr std::uint32_t wire_id = 48;
  std::string job_id;
  std::int32_t attempt = 0;
  std::uint64_t seq = 0;
  std::int64_t epoch = 0;
};
// trainer → worker, and on to the worker process as a codec frame on its command link
// (worker_process_link.hpp): what the trainer tells a running rank between steps. The counts
// are the attempt's totals so far, so a command told again (to a rank that started late) or
// merged changes nothing: a worker keeps the largest it was told.
//   checkpoint  the attempt's n-th checkpoint request: rank 0 takes it before its next step and
//               the step's all-reduce makes every rank save after that step
//   release     the attempt's n-th release: a rank held at its n-th run.hold_before_step goes on
//   preempt     a node of the attempt is leaving; n counts the checkpoint requests as above (the
//               preemption is one): the ranks save after the next step, then wait to be stopped
//   stop        end now, as SIGTERM does (n unused)
enum class worker_command_kind : std::uint8_t { checkpoint, release, preempt, stop };
constexpr worker_command_kind wire_enum_max(worker_command_kind) { return worker_command_kind::stop; }
inline const char* to_string(worker_command_kind k) {
  switch (k) {
    case worker_command_kind::checkpoint: return "checkpoint";
    case worker_command_kind::release: return "release";
    case worker_command_kind::preempt: return "preempt";
    case worker_command_kind::stop: return "stop";
  }
  return "unknown";
}
struct worker_command {
  static constexpr std::uint32_t wire_id = 68;
  std::string job_id;
  std::int32_t attempt = 0;
  worker_command_kind kind = worker_command_kind::checkpoint;
  std::int64_t n = 0;
  std::int64_t deadline_ms = 0;  // preempt: the preemption's deadline (unix ms; 0: a resize's save)
};
// ---- The worker process link (worker_process_link.hpp) ----
// A cluster-worker's worker actor and the worker process it started speak these, and
// worker_command node → process, as codec frames; these never travel on the cluster wire
// (wire_protocol.cpp static_asserts it).
// The first frame each end writes, on fd 3 and on fd 4: the version of the link's protocol it
// speaks (worker_link_version). A reader refuses a link that opens with anything else or with
// another version, naming both: cohort-worker and cluster-worker come from one build.
struct link_hello {
  static constexpr std::uint32_t wire_id = 72;
  std::uint32_t version = 0;
};
// Worker process → its worker actor. They carry no job, attempt or rank: the actor knows which
// process it started and stamps them on what it passes on to the trainer.
// A logged step of the process's rank; passed on as progress_report.
struct process_progress : step_progress {
  static constexpr std::uint32_t wire_id = 69;
};
// The process is alive at step `step`; collective_wait_s as in rank_heartbeat. Passed on as
// rank_heartbeat.
struct process_heartbeat {
  static constexpr std::uint32_t wire_id = 70;
  std::int64_t step = 0;
  double collective_wait_s = -1;
  heartbeat_activity activity{};
};
// A line the process's workload logged (worker_context::log); passed on as log_line. On the link,
// not stdout, so that it reaches the trainer before any report the process sends after it: a
// rank that logs why and then reports is heard in that order, even when the report ends the
// attempt.
struct process_log {
  static constexpr std::uint32_t wire_id = 74;
  std::string line;
};
// The process's own account of how its run ended, written just before it exits; the actor
// reports it in worker_finished once the process has ended.
struct process_finished {
  static constexpr std::uint32_t wire_id = 71;
  bool ok = false;
  std::string reason;
  failure_kind kind = failure_kind::retryable;
};

// head → trainer: a node of the attempt is leaving (preemption). The ranks save an emergency
// checkpoint after their next step and then wait (no further step) until the head stops the
// attempt, which it does once the checkpoint committed or run.failure.preemption_grace_s passed.
struct preempt_attempt {
  static constexpr std::uint32_t wire_id = 60;
  std::string job_id;
  std::int32_t attempt = 0;
  std::int64_t epoch = 0;
  // By when the emergency checkpoint must have committed (unix ms): the job's
  // run.failure.preemption_grace_s from now, or the cloud's notice's deadline when sooner. 0: no
  // node leaves; the head stops the attempt to resize the job (it grows back), after its save.
  std::int64_t deadline_ms = 0;
};
// client → head: drain a node (drain true: the jobs with ranks there save an emergency checkpoint
// and restart elsewhere, and nothing new is placed on it while it stays registered) or make a
// drained node schedulable again (drain false). Reply: drain_reply.
struct drain_node {
  static constexpr std::uint32_t wire_id = 61;
  std::string node;
  bool drain = true;
};
struct drain_reply {
  static constexpr std::uint32_t wire_id = 62;
  std::string node;
  std::string drain_state;        // after the request: "" schedulable, "drained", "preempted"
  std::vector<std::string> jobs;  // the jobs the drain preempted
};
// head → every node: job `job_id` ended for good (SUCCEEDED, FAILED or STOPPED): the node drops
// what it keeps for the job's restarts, its peer replicas (run.checkpoint.replicate), found from
// the job's run directory as its workers name it (run_dir_of).
struct job_ended {
  static constexpr std::uint32_t wire_id = 73;
  std::string job_id;
  std::string name;          // the spec's name
  std::string storage_path;  // run.storage_path
  std::string local_dir;     // run.local_dir
};
// node → head: this node leaves (its cluster-worker got SIGTERM, a spot instance's notice). The
// head drains it as `submit drain` does; the node exits once its trainers and workers stopped.
struct node_draining {
  static constexpr std::uint32_t wire_id = 63;
  std::string node;
  std::string reason;
  std::int64_t deadline_ms = 0;  // a cloud's notice: when the VM goes (unix ms); 0: none (SIGTERM)
};

// client → head: where would this job run now? Reply: plan_reply.
struct plan_request {
  static constexpr std::uint32_t wire_id = 39;
  std::string spec_json;
};
// One item of what a rank needs, as core/train/memory_estimate.hpp counts it.
struct memory_plan_item {
  static constexpr std::uint32_t wire_id = 64;
  std::string name;   // e.g. "fp32 master shard"
  double bytes = 0;
  std::string where;  // "gpu" or "host"
};
// What every rank of a causal_lm job needs in GPU memory and host RAM, computed by the head from
// the model's config.json (core/train/memory_estimate.hpp), so that the client needs no engine.
// known false: not a causal_lm job, nothing estimated.
struct memory_plan {
  static constexpr std::uint32_t wire_id = 65;
  bool known = false;
  std::int64_t parameters = 0;
  std::string setting;  // "ZeRO-3, bf16, offload_param cpu" and the like
  double device_bytes = 0;  // per rank, cuda_context_bytes included
  double host_bytes = 0;    // per rank: max(steady, load peak)
  double steady_host_bytes = 0;
  double load_peak_host_bytes = 0;
  double activation_bytes = 0;
  std::vector<memory_plan_item> items;
  double cuda_context_bytes = 0;      // 0 for CPU jobs
  double rank0_extra_host_bytes = 0;  // rank 0's export staging buffer
};
struct plan_reply {
  static constexpr std::uint32_t wire_id = 40;
  std::string status;  // "placed", "pending" or "infeasible"
  std::string trainer_node;
  std::vector<std::string> rank_nodes;
  std::string reason;
  memory_plan memory;  // when placed
};
// Wire ids 38 and 41 were the failure drills (now in-process only, drill_messages.hpp); they stay
// unused so that no peer of an older build reads a new message as a drill.

// The field lists: one per record, in wire order.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, failure_cause& x) {
  using net::field;
  using net::field_or_default;
  return f(caf::meta::type_name("failure_cause"), field("attempt"), x.attempt, field("rank"), x.rank,
           field("node"), x.node, field("reason"), x.reason, field_or_default("kind"), x.kind,
           field_or_default("hung"), x.hung, field_or_default("pid"), x.pid,
           field_or_default("last_step"), x.last_step, field_or_default("report"), x.report);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_record& x) {
  using net::field;
  using net::field_or_default;
  // The JSON view leaves the spec out: the store keeps it in spec.json.
  return f(caf::meta::type_name("job_record"), field("id"), x.id, field("name"), x.name, field("state"),
           x.state, field("reason"), x.reason, field("attempts"), x.attempts, field("failures"), x.failures,
           field("trainer_node"), x.trainer_node, field("rank_nodes"), x.rank_nodes, field("step"), x.step,
           field("total_steps"), x.total_steps, field_or_default("loss"), x.loss,
           field_or_default("checkpoint_step"), x.checkpoint_step, net::wire_only("spec_json"), x.spec_json,
           field_or_default("rank_gpus"), x.rank_gpus, field_or_default("held_before_step"),
           x.held_before_step, field_or_default("preemptions"), x.preemptions, field_or_default("eval_step"),
           x.eval_step, field_or_default("eval_loss"), x.eval_loss, field_or_default("eval_perplexity"),
           x.eval_perplexity, field_or_default("activity"), x.activity, field_or_default("phase"), x.phase,
           field_or_default("phase_checkpoint_before"), x.phase_checkpoint_before,
           field_or_default("phase_deadline_ms"), x.phase_deadline_ms, field_or_default("phase_node"),
           x.phase_node, field_or_default("phase_why"), x.phase_why, field_or_default("phase_to"), x.phase_to,
           field_or_default("resizes"), x.resizes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_info& x) {
  using net::field;
  return f(caf::meta::type_name("node_info"), field("name"), x.name, field("resources"), x.resources,
           field("address"), x.address, field("gpu_memory_bytes"), x.gpu_memory_bytes,
           field("accelerator_type"), x.accelerator_type, field("gpu_ids"), x.gpu_ids,
           field("gpu_note"), x.gpu_note, field("drain_state"), x.drain_state);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, trainer_setup& x) {
  return f(caf::meta::type_name("trainer_setup"), x.job_id, x.spec, x.attempt, x.trainer_node, x.rank_nodes,
           x.rank_gpus);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_setup& x) {
  using net::field;
  return f(caf::meta::type_name("worker_setup"), field("job_id"), x.job_id, field("spec"), x.spec,
           field("rank"), x.rank, field("world_size"), x.world_size, field("attempt"), x.attempt,
           field("node"), x.node, field("store_address"), x.store_address, field("node_address"),
           x.node_address, field("gpus"), x.gpus, field("store_secret"), x.store_secret, field("local_rank"),
           x.local_rank, field("local_world"), x.local_world);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_progress& x) {
  return f(caf::meta::type_name("step_progress"), x.step, x.total_steps, x.loss, x.lr, x.grad_norm,
           x.tokens_per_s, x.mfu, x.checkpoint_step, x.held_before_step, x.eval_step, x.eval_loss,
           x.eval_perplexity, x.no_emergency_save);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, progress_report& x) {
  return f(caf::meta::type_name("progress_report"), x.job_id, x.rank, x.attempt,
           static_cast<step_progress&>(x), x.activity);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_outcome& x) {
  return f(caf::meta::type_name("attempt_outcome"), x.job_id, x.attempt, x.succeeded, x.cause);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, log_line& x) {
  // The JSON view is a line of the store's logs.jsonl (the store adds its own "seq" and "ts"; the
  // trainer's number is "attempt_seq"); lines of earlier heads may lack any field.
  using net::field_or_default;
  return f(caf::meta::type_name("log_line"), net::wire_only("job_id"), x.job_id, field_or_default("rank"),
           x.rank, field_or_default("node"), x.node, field_or_default("pid"), x.pid, field_or_default("line"),
           x.text, field_or_default("attempt"), x.attempt, field_or_default("attempt_seq"), x.seq,
           field_or_default("kept_from"), x.kept_from);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_event& x) {
  return f(caf::meta::type_name("job_event"), x.record, x.line);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, submit_job& x) {
  return f(caf::meta::type_name("submit_job"), x.spec_json);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_accepted& x) {
  return f(caf::meta::type_name("job_accepted"), x.job_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_query& x) {
  return f(caf::meta::type_name("job_query"), x.job_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_list_query& x) {
  return f(caf::meta::type_name("job_list_query"), x.unused);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_list& x) {
  return f(caf::meta::type_name("job_list"), x.jobs, x.nodes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_job& x) {
  return f(caf::meta::type_name("checkpoint_job"), x.job_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_attempt& x) {
  return f(caf::meta::type_name("checkpoint_attempt"), x.job_id, x.attempt, x.epoch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, release_job& x) {
  return f(caf::meta::type_name("release_job"), x.job_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, release_attempt& x) {
  return f(caf::meta::type_name("release_attempt"), x.job_id, x.attempt, x.epoch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, outcome_ack& x) {
  return f(caf::meta::type_name("outcome_ack"), x.job_id, x.attempt, x.epoch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, log_ack& x) {
  return f(caf::meta::type_name("log_ack"), x.job_id, x.attempt, x.seq, x.epoch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stop_job& x) {
  return f(caf::meta::type_name("stop_job"), x.job_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, follow_job& x) {
  return f(caf::meta::type_name("follow_job"), x.job_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, logs_query& x) {
  return f(caf::meta::type_name("logs_query"), x.job_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_logs& x) {
  return f(caf::meta::type_name("job_logs"), x.lines);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, follow_logs& x) {
  return f(caf::meta::type_name("follow_logs"), x.job_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, followed_logs& x) {
  return f(caf::meta::type_name("followed_logs"), x.record, x.lines);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_hello& x) {
  return f(caf::meta::type_name("node_hello"), x.info);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, start_trainer& x) {
  return f(caf::meta::type_name("start_trainer"), x.setup, x.epoch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, trainer_started& x) {
  return f(caf::meta::type_name("trainer_started"), x.job_id, x.attempt);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, start_worker& x) {
  return f(caf::meta::type_name("start_worker"), x.setup);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_started& x) {
  return f(caf::meta::type_name("worker_started"), x.job_id, x.attempt, x.rank, x.pid);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_finished& x) {
  return f(caf::meta::type_name("worker_finished"), x.job_id, x.attempt, x.rank, x.ok, x.reason,
           x.kind, x.report);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, heartbeat_activity& x) {
  return f(caf::meta::type_name("heartbeat_activity"), x.phase, x.step, x.bytes_done, x.bytes_total);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_heartbeat& x) {
  return f(caf::meta::type_name("rank_heartbeat"), x.job_id, x.attempt, x.rank, x.step,
           x.collective_wait_s, x.activity);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kill_hung_worker& x) {
  return f(caf::meta::type_name("kill_hung_worker"), x.job_id, x.attempt, x.rank);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_running& x) {
  return f(caf::meta::type_name("attempt_running"), x.job_id, x.attempt);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_command& x) {
  return f(caf::meta::type_name("worker_command"), x.job_id, x.attempt, x.kind, x.n, x.deadline_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, link_hello& x) {
  return f(caf::meta::type_name("link_hello"), x.version);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, process_progress& x) {
  return f(caf::meta::type_name("process_progress"), static_cast<step_progress&>(x));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, process_heartbeat& x) {
  return f(caf::meta::type_name("process_heartbeat"), x.step, x.collective_wait_s, x.activity);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, process_log& x) {
  return f(caf::meta::type_name("process_log"), x.line);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, process_finished& x) {
  return f(caf::meta::type_name("process_finished"), x.ok, x.reason, x.kind);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stop_attempt& x) {
  return f(caf::meta::type_name("stop_attempt"), x.job_id, x.attempt, x.reason, x.epoch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, plan_request& x) {
  return f(caf::meta::type_name("plan_request"), x.spec_json);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, memory_plan_item& x) {
  return f(caf::meta::type_name("memory_plan_item"), x.name, x.bytes, x.where);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, memory_plan& x) {
  return f(caf::meta::type_name("memory_plan"), x.known, x.parameters, x.setting, x.device_bytes,
           x.host_bytes, x.steady_host_bytes, x.load_peak_host_bytes, x.activation_bytes, x.items,
           x.cuda_context_bytes, x.rank0_extra_host_bytes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, plan_reply& x) {
  return f(caf::meta::type_name("plan_reply"), x.status, x.trainer_node, x.rank_nodes, x.reason,
           x.memory);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, preempt_attempt& x) {
  return f(caf::meta::type_name("preempt_attempt"), x.job_id, x.attempt, x.epoch, x.deadline_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, drain_node& x) {
  return f(caf::meta::type_name("drain_node"), x.node, x.drain);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, drain_reply& x) {
  return f(caf::meta::type_name("drain_reply"), x.node, x.drain_state, x.jobs);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_ended& x) {
  return f(caf::meta::type_name("job_ended"), x.job_id, x.name, x.storage_path, x.local_dir);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_draining& x) {
  return f(caf::meta::type_name("node_draining"), x.node, x.reason, x.deadline_ms);
}

// The worker process link's messages, both ways (worker_process_link.hpp).
using worker_link_messages = net::wire_types<link_hello, worker_command, process_progress, process_heartbeat,
                                             process_finished, process_log>;

}  // namespace cohort::actors

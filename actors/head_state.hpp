// The head's logic without CAF: the node registry with free resources, the job table, placement
// of waiting jobs, GPU isolation (which of a node's GPUs each rank gets, see
// core/resources/gpu_assignment.hpp), memory admission, and the failure policy
// (failure.max_failures), draining nodes and preemptions (failure.max_preemptions), and elastic
// jobs growing back (scaling.resize_interval_s). A causal_lm job's rank memory plan (core/train/memory_estimate.hpp, from
// its config.json) is made once at submit: a job whose ranks fit no node's GPU memory
// (min(node, COHORT_GPU_MEMORY_LIMIT_GB)) or RAM (the "memory" resource), or whose model cannot be
// read, is FAILED with the numbers; one that fits some node waits PENDING for room. Unknown GPU
// memory (0) or RAM never refuses. The head actor is a thin shell around it; this class is
// unit-tested alone. Not thread-safe: the head actor owns it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "config/job_spec.hpp"
#include "core/resources/gpu_assignment.hpp"
#include "core/resources/node_inventory.hpp"
#include "core/resources/placement.hpp"
#include "core/train/memory_estimate.hpp"

namespace cohort::actors {

// The fields of a job record whose change the head writes to the store (state.json, and a line of
// events.jsonl): state, reason, attempts, the trainer's node, preemptions and the attempt's phase
// (a preemption or resize in progress). Progress alone (step, loss, checkpoint_step) is not
// written at every step; it goes along with the next such change.
struct persisted_job_fields {
  job_state state = job_state::pending;
  std::string reason;
  std::int32_t attempts = 0;
  std::string trainer_node;
  std::int32_t preemptions = 0;

  std::string phase;

  static persisted_job_fields of(const job_record& r) {
    return {r.state, r.reason, r.attempts, r.trainer_node, r.preemptions, r.phase};
  }
  bool operator==(const persisted_job_fields& o) const {
    return state == o.state && reason == o.reason && attempts == o.attempts &&
           trainer_node == o.trainer_node && preemptions == o.preemptions && phase == o.phase;
  }
  bool operator!=(const persisted_job_fields& o) const { return !(*this == o); }
};

class head_state {
 public:
  // Registers a node, or replaces the record of one that registers again under the same name.
  // Memory admission reads node.gpu_memory_bytes (its smallest GPU's; 0 = unknown).
  void add_node(const node_info& node);
  // Forgets a node (it died or left). Its reservations stay until the jobs using it are told.
  void remove_node(const std::string& name);
  bool has_node(const std::string& name) const;
  // The registered nodes, by name.
  std::vector<node_info> nodes() const;

  // Drains a node: nothing new is placed on it from now on. `kind` is "preempted" (the node
  // announced that it leaves, SIGTERM; the mark goes when the node is removed) or "drained"
  // (`submit drain`; the mark stays, across re-registration and removal, until undrain). Returns
  // the unfinished jobs whose current attempt has ranks there (to preempt). Throws
  // std::invalid_argument for a node that is not registered or another kind.
  std::vector<std::string> drain(const std::string& node, const std::string& kind);
  // Makes a drained node schedulable again; false when it was not draining.
  bool undrain(const std::string& node);
  // "" (schedulable), "preempted" or "drained".
  std::string drain_state(const std::string& node) const;

  // Starts preempting the current attempt of a job because `node` (one of its nodes) is leaving;
  // `why` says how ("node n2 got SIGTERM (a preemption notice)"): the job stays RUNNING with a reason that
  // says so until on_preempted. Returns false when the job has no attempt to preempt (not placed, ended) or
  // one is being preempted. The attempt's deadline (unix ms, preemption_deadline_ms) is `now_ms` plus the
  // job's run.failure.preemption_grace_s, or the notice's `notice_deadline_ms` (0: none) when sooner.
  bool begin_preemption(const std::string& job_id, const std::string& node, const std::string& why,
                        std::int64_t now_ms = 0, std::int64_t notice_deadline_ms = 0);
  // The deadline of the preemption under way (unix ms), 0 when none.
  std::int64_t preemption_deadline_ms(const std::string& job_id) const;
  // Whether a preempted attempt's rank 0 reported that it saves no emergency checkpoint
  // (progress_report::no_emergency_save: it cannot end before the deadline): stop it now.
  bool emergency_checkpoint_declined(const std::string& job_id) const;
  // Whether the job's current attempt is being preempted.
  bool preempting(const std::string& job_id) const;
  // Whether a preempted attempt reported a checkpoint newer than the newest when the preemption
  // began (its emergency checkpoint committed): the attempt may be stopped now.
  bool emergency_checkpoint_committed(const std::string& job_id) const;
  // An elastic job that could run on more ranks now (see growable).
  struct growth {
    std::string job_id;
    std::int32_t from = 0, to = 0;  // ranks now, ranks it would get
  };
  // Elastic causal_lm jobs (scaling.min_workers) RUNNING on fewer than num_workers ranks whose
  // attempt has run scaling.resize_interval_s by `now_ms` (unix ms), being neither preempted nor
  // resized nor awaiting adoption, for which the schedulable nodes, with what the attempt holds
  // given back, would place more ranks (the most that keep the global batch, up to num_workers).
  // None behind a job that waits for placement: its restart would be placed after that job.
  std::vector<growth> growable(std::int64_t now_ms) const;
  // When the job's current attempt may first grow (unix ms): it started running at this time plus
  // scaling.resize_interval_s; 0 when it is not running.
  std::int64_t resize_due_ms(const std::string& job_id) const;
  // Starts growing a job found growable to `to` ranks: it stays RUNNING with a reason that says
  // so until on_resized. False when it has no attempt to resize or one is being preempted or
  // resized.
  bool begin_resize(const std::string& job_id, std::int32_t to);
  // Whether the job's current attempt is being stopped to grow.
  bool resizing(const std::string& job_id) const;
  // Whether that attempt reported a checkpoint newer than the newest when the resize began: it may
  // be stopped now.
  bool resize_checkpoint_committed(const std::string& job_id) const;
  // Ends attempt `attempt` as resized (the head stops its trainer): releases its placement and
  // restarts the job, counting neither a failure nor a preemption. Returns the record after.
  const job_record& on_resized(const std::string& job_id, std::int32_t attempt);

  // Ends attempt `attempt` as preempted (the head stops its trainer): releases its placement,
  // counts a preemption (never a failure; no rank blamed) and restarts the job while
  // failure.max_preemptions allows, else FAILED naming the count. Returns the record after.
  const job_record& on_preempted(const std::string& job_id, std::int32_t attempt);

  // Accepts a parsed spec; returns the new job's id (`id` when given: the store allocates ids).
  // The job starts PENDING.
  std::string submit(const config::job_spec& spec, const std::string& spec_json,
                     const std::string& id = "");
  // Puts back a job read from the store (head restart). A RUNNING job keeps its placement
  // reserved and waits for its trainer to announce itself again (adopt); one that never does is
  // ended with on_trainer_lost by the caller. `spec`: the record's spec_json as the caller parsed
  // it (once: the trainers get it as it is).
  void restore(const job_record& record, config::job_spec spec);
  // Jobs restored RUNNING whose trainer has not announced itself yet.
  std::vector<std::string> awaiting_adoption() const;
  // A trainer announced itself for attempt `attempt` of a job: true when that is the attempt the
  // head expects (a restored job is adopted then).
  bool on_trainer_started(const std::string& job_id, std::int32_t attempt);
  // Unfinished jobs whose current placement uses `node`.
  std::vector<std::string> jobs_placed_on(const std::string& node) const;
  // Where a spec would run now (`submit plan` against the live cluster); a job the memory plan
  // refuses is infeasible with the refusal as its reason.
  core::resources::placement_result plan(const config::job_spec& spec) const;

  // Places every waiting job that fits now, reserves its resources and GPUs (each rank's GPU
  // indices in trainer_setup::rank_gpus) and returns what to start. A job asking more GPUs per
  // worker than any node has offered since this head started ends FAILED, naming the numbers
  // (it could never run); one that fits a node that is gone waits PENDING, and one that the alive
  // nodes could not hold even when idle waits PENDING with the reason "infeasible on the current
  // cluster: needs … has …". Draining nodes take no placement. An elastic job
  // (scaling.min_workers) that does not fit with num_workers ranks starts on fewer (see
  // config::shrunk_to); its trainer_setup::spec is then the shrunk spec.
  std::vector<trainer_setup> schedule();
  // Why a job can never get its GPUs on this cluster (the FAILED reason), or "" when it can or
  // no node is alive to judge by.
  std::string gpu_refusal(const config::job_spec& spec) const;
  // GPU indices in use on a node (share of each, 0..1), for tests; empty when unknown.
  std::vector<double> gpu_use(const std::string& node) const;

  // The trainer of attempt `outcome.attempt` ended it. Releases the reservation; applies the
  // failure policy (an attempt being preempted that fails counts as preempted instead): a bad_input failure ends the job FAILED at once, whatever
  // failure.max_failures says; a retryable one restarts it while max_failures allows. Returns the
  // job's record after the change.
  const job_record& on_outcome(const attempt_outcome& outcome);
  // The trainer died without reporting (its node died, or it crashed). Counted like a failure of
  // the attempt with rank -1.
  const job_record& on_trainer_lost(const std::string& job_id, std::int32_t attempt,
                                    const std::string& reason);
  // Stops a job: STOPPED, reservation released. Returns false if unknown or already ended.
  bool stop(const std::string& job_id, const std::string& reason);
  // The job's trainer has all workers up (at `now_ms`, unix ms: where scaling.resize_interval_s
  // counts from): RUNNING, when the attempt is the job's current one and still holds its placement
  // here (not one given up with a lost node).
  void on_running(const std::string& job_id, std::int32_t attempt, std::int64_t now_ms = 0);
  // Rank 0's step report: step, loss, newest checkpoint, and whether the attempt is held at
  // run.hold_before_step (cleared again when the attempt ends). Only the job's current attempt
  // (report.attempt, stamped by its trainer) counts: a report of another attempt (a zombie still
  // running after a newer attempt started) changes nothing and returns false.
  bool on_progress(const progress_report& report);

  const job_record* find(const std::string& job_id) const;
  // The job's parsed spec, or nullptr when unknown.
  const config::job_spec* spec(const std::string& job_id) const;
  std::vector<job_record> jobs() const;
  // The same records, in submission order, without copying them (a head keeps every job it ran:
  // what runs per event must not copy them all); valid until the next submit or restore.
  std::vector<const job_record*> records() const;
  // Free resources of a node (for tests and `submit plan`); empty when unknown.
  std::map<std::string, double> available(const std::string& node) const;
  // The inventories of the registered nodes, as placement sees them.
  const std::vector<core::resources::node_inventory>& inventories() const { return nodes_; }

 private:
  struct job_entry {
    job_record record;
    config::job_spec spec;
    std::optional<core::resources::placement> held;  // reserved while an attempt runs
    core::resources::rank_gpu_indices gpus;             // held's GPU indices per rank
    std::int32_t failures_counted = 0;
    bool awaiting_adoption = false;
    std::optional<core::train::memory_estimate> memory;  // causal_lm jobs with a readable model
    std::string memory_error;                             // why there is no plan: FAILED
    double gpu_limit_bytes = 0;                           // COHORT_GPU_MEMORY_LIMIT_GB; 0 = none
    struct preemption {
      std::int32_t attempt = 0;
      std::string node, why;
      std::int64_t checkpoint_before = 0;  // the newest checkpoint or step reported when it began
      std::int64_t deadline_ms = 0;        // unix ms: the grace's end, or the notice's if sooner
      std::string declined;                // rank 0's why it saves no emergency checkpoint
    };
    std::optional<preemption> preempting;  // the current attempt's, until it ends
    struct resize {
      std::int32_t attempt = 0;
      std::int32_t from = 0, to = 0;       // ranks
      std::int64_t checkpoint_before = 0;  // as for a preemption
    };
    std::optional<resize> resizing;     // the current attempt's, until it ends
    std::int64_t running_since_ms = 0;  // when the current attempt's workers all ran (unix ms)
  };
  // Placement with memory admission: refused (FAILED) with the numbers, else the placement on
  // the nodes whose GPU memory and RAM hold a rank; placed only when every node can hold the
  // host RAM of the ranks put on it.
  struct admission {
    bool refused = false;
    core::resources::placement_result result;
  };

  static void plan_memory(job_entry& job);
  admission admit(const job_entry& job) const;
  admission admit(const job_entry& job, const std::vector<core::resources::node_inventory>& nodes) const;
  // Placement of a job on `nodes` with num_workers ranks, else (an elastic job) with the most
  // ranks down to `least` that keep the global batch; `fewer`: the shrunk spec when it was that.
  struct elastic_fit {
    admission admitted;
    std::optional<config::job_spec> fewer;
  };
  elastic_fit fit_elastic(const job_entry& job, const std::vector<core::resources::node_inventory>& nodes,
                          int least) const;
  // Whether job `job_id` is in a phase (`phase`: its preempting or resizing) and, with
  // `committed`, reported a checkpoint newer than the newest when the phase began.
  template <class Phase>
  bool in_phase(const std::string& job_id, std::optional<Phase> job_entry::*phase, bool committed) const {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || !(it->second.*phase)) return false;
    return !committed || it->second.record.checkpoint_step > (it->second.*phase)->checkpoint_before;
  }
  // How many ranks the job would get now were its attempt's placement given back; 0: none.
  std::int32_t ranks_it_could_get(const job_entry& job) const;
  // The PENDING reason of a job the alive nodes cannot hold even when idle; `why` is placement's.
  std::string infeasible_reason(const config::job_spec& spec, const std::string& why) const;

  void release(job_entry& job);
  void record_preemption(job_entry& job);
  // The record's phase fields (job_record::phase) as the entry's preempting/resizing say, so that
  // the store keeps them; restore_phase: the entry's from a restored record's, for an attempt that
  // awaits adoption.
  static void mirror_phase(job_entry& job);
  static void restore_phase(job_entry& job);
  // The registered nodes that take new placements (not draining).
  std::vector<core::resources::node_inventory> schedulable() const;
  void record_failure(job_entry& job, const failure_cause& cause);
  job_entry& entry(const std::string& job_id);

  std::vector<core::resources::node_inventory> nodes_;  // by name: placement's ties go to the
                                                        // first, whatever order nodes joined in
  std::map<std::string, node_info> node_infos_;         // as registered, by name
  std::map<std::string, core::resources::gpu_pool> gpu_pools_;  // by node name
  double largest_gpu_offer_ = 0;  // the most GPUs one node has offered since this head started
  std::map<std::string, std::string> draining_;  // node → "preempted" | "drained"
  std::map<std::string, job_entry> jobs_;
  std::vector<std::string> job_order_;   // submission order: first come, first placed
  std::int64_t next_job_number_ = 1;
};

// What each rank of `spec` needs in GPU memory and host RAM, item by item (`submit plan`, from
// the model's config.json alone): known false for a job that is not causal_lm. Throws
// std::invalid_argument naming the model field when the model's shape cannot be read.
memory_plan plan_rank_memory(const config::job_spec& spec);

}  // namespace cohort::actors

// The CAF-facing declarations of cohort's actors: the state of each and the function that gives
// its behavior. Each actor is a thin shell; its logic lives in a plain *_state class or in core.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/drill_messages.hpp"
#include "actors/epoch_fence.hpp"
#include "actors/hang_detector.hpp"
#include "actors/log_sequence.hpp"
#include "actors/head_state.hpp"
#include "actors/messages.hpp"
#include "actors/node_directory.hpp"
#include "actors/workload_runner.hpp"
#include "core/comm/tcp_store_server.hpp"
#include "core/store/cluster_store.hpp"

namespace cohort::actors {

// A node whose link to the head came back introduces itself again (node_hello), and its
// trainers announce themselves again (trainer_started), so a restarted head adopts them.
// `epoch`: the leader that welcomed the node (0 when a trainer is told by its node).
struct reintroduce {
  std::int64_t epoch = 0;
};
// An embedded cluster's round trip to a node: answered (true) once the node has started, so
// after its node_hello went out.
struct node_ping {};
// Head timer: give up on restored jobs whose trainers did not return.
struct adoption_deadline {};
// Head timer: a preempted attempt's run.failure.preemption_grace_s is over; it is stopped now
// whether or not its emergency checkpoint committed.
struct preemption_deadline {
  std::string job_id;
  std::int32_t attempt = 0;
};
// cluster-worker → its node actor: the process got SIGTERM (a preemption notice). The node tells
// the head (node_draining) and quits once its trainers and workers are gone, or at the latest
// after the longest run.failure.preemption_grace_s of its jobs plus drain_margin.
struct begin_drain {
  std::string reason;
};
struct drain_deadline {};
constexpr std::chrono::seconds drain_margin{15};
// cluster-head → its head actor: the lease names `address` from now on (the port a head asked
// for as 0 is known once it bound).
struct publish_address {
  std::string address;
};

// How many lines of worker output an embedded head (no store) keeps per job for `submit logs`.
constexpr std::size_t max_log_lines_per_job = 10000;

// What a head persists to and how long it waits for trainers after a restart.
struct head_options {
  std::shared_ptr<core::store::cluster_store> store;  // null: nothing persists (embedded)
  std::int64_t epoch = 0;                             // the lease epoch every write carries
  std::chrono::milliseconds adoption_grace{15000};
  std::chrono::milliseconds lease_ttl{10000};
  // Canonical --storage-root directories: a job naming a path outside every one of them is
  // refused at submit (config/storage_roots.hpp). Empty: no restriction.
  std::vector<std::filesystem::path> storage_roots;
};

struct head_actor_state {
  head_state logic;
  head_options options;
  std::map<std::string, persisted_job_fields> persisted;  // job → what was last written of it
  std::map<std::string, caf::actor> node_actors;  // by node name
  std::map<caf::actor_addr, std::string> node_by_addr;
  struct trainer_ref {
    std::string job_id;
    std::int32_t attempt;
    caf::actor handle;
  };
  std::map<caf::actor_addr, trainer_ref> trainers;
  std::map<std::string, std::vector<caf::actor>> followers;  // by job id
  // Each job's logged steps for the dashboard's charts and, its last point, the metrics'
  // training gauges (add_history_point), by job id.
  std::map<std::string, std::vector<progress_report>> progress_history;
  // Followers of a job's output whose stored lines are being read (follow_logs with a store):
  // the events meanwhile wait here and are sent after the reply, so none is lost or repeated.
  struct catching_up_follower {
    caf::actor who;
    std::vector<job_event> held;
  };
  std::map<std::string, std::vector<catching_up_follower>> catching_up;  // by job id
  std::map<std::string, std::deque<log_line>> logs;  // by job id; only without a store
  // With a store: the detached actor that does the head's store writes (store_writer.hpp).
  caf::actor store_writer;
  // A job id taken in the store ahead of the next submit ("" while none), whether the writer is
  // taking one, and the submits waiting for one, in their order (head_actor.cpp, reserve_job_id).
  std::string reserved_job_id;
  bool reserving_job_id = false;
  struct waiting_submit {
    config::job_spec spec;
    std::string spec_json;  // as submitted: what the store keeps
    caf::typed_response_promise<job_accepted> promise;
  };
  std::deque<waiting_submit> waiting_for_id;
  // The running attempts' output lines stored, so lines a trainer sends again after a failover
  // are stored once (restored from the store's logs of unfinished jobs).
  log_sequence log_seq;
  // Until when this head may act as leader without renewing first (its last renewal, started at
  // t, plus 0.9 of the lease ttl). A head woken from SIGSTOP past it renews before it writes or
  // commands anything, and steps down (writing nothing) when a newer epoch exists.
  std::chrono::steady_clock::time_point lease_valid_until{};
  bool stepped_down = false;
  static inline const char* name = "cohort.head";
};
caf::behavior head_actor(caf::stateful_actor<head_actor_state>* self, head_options options);

// How a node runs a worker: an actor with a thread in this process (embedded clusters), or an
// actor standing for a worker OS process (cluster-worker). Called on the node's thread; returns
// the spawned actor, which sends worker_started to `trainer` itself.
using worker_spawner =
    std::function<caf::actor(caf::local_actor* node, const worker_setup&, const caf::actor& trainer)>;

struct node_actor_state {
  node_info info;
  caf::actor head;
  std::shared_ptr<node_directory> directory;
  worker_spawner spawn_worker;
  struct worker_ref {
    std::string job_id;
    std::int32_t rank;
    caf::actor handle;
  };
  std::map<caf::actor_addr, worker_ref> workers;
  std::set<caf::actor_addr> children;  // linked trainers and workers, until their exit arrives
  std::map<std::string, caf::actor> trainer_of_job;
  double longest_grace_s = 0;  // the longest run.failure.preemption_grace_s of the jobs it ran
  bool draining = false;       // begin_drain came: it quits once `children` is empty
  std::shared_ptr<epoch_fence> fence;
  static inline const char* name = "cohort.node";
};
// `fence`: the newest leader epoch this node process has seen; head commands of older epochs are
// refused (null: a fence of the node's own).
caf::behavior node_actor(caf::stateful_actor<node_actor_state>* self, node_info info,
                         caf::actor head, std::shared_ptr<node_directory> directory,
                         worker_spawner spawn_worker, std::shared_ptr<epoch_fence> fence);

struct trainer_actor_state {
  trainer_setup setup;
  caf::actor head;
  std::vector<caf::actor> workers;  // by rank; null until started
  std::vector<std::int64_t> pids;   // by rank; 0 until started
  // Judges the ranks' progress and heartbeats (run.failure.hang_timeout_s); checked every
  // heartbeat interval. Empty when the spec could not be read (the workers then fail on it).
  std::optional<hang_detector> hang;
  std::chrono::milliseconds hang_check_every{1000};
  std::map<caf::actor_addr, std::int32_t> rank_of;
  std::set<std::int32_t> done;
  std::int32_t started = 0;
  bool settled = false;
  std::optional<progress_report> last_report;  // rank 0's newest, told again to a restarted head
  // The rendezvous store the attempt's workers bootstrap their collective group through.
  std::unique_ptr<core::comm::tcp_store_server> store;
  std::string store_secret;  // the store's (raw bytes); handed to this attempt's workers only
  std::shared_ptr<epoch_fence> fence;  // the node's: head commands of older epochs are refused
  // What the attempt's workers were told (worker_command): totals, told again to a worker that
  // starts after them.
  std::int64_t checkpoint_requests = 0;  // checkpoint_attempt and preempt_attempt so far
  std::int64_t releases = 0;             // release_attempt so far
  bool preempted = false;
  // The attempt's output lines the head has not acknowledged (log_ack), oldest first, at most
  // max_unacked_log_bytes of text: sent again to a head that adopts the trainer, so lines
  // written while no leader was reachable are kept. Lines dropped to stay in bounds are counted
  // and the count is told to the next head.
  std::deque<log_line> unacked_logs;
  std::size_t unacked_log_bytes = 0;
  std::uint64_t next_log_seq = 0;
  std::uint64_t dropped_logs = 0;  // not yet told
  // The attempt's outcome once settled: kept, and sent again to every head that adopts the
  // trainer, until a head acknowledges it (outcome_ack), so an attempt that ends while no leader
  // is reachable is not taken for lost by the next one.
  std::optional<attempt_outcome> outcome;
  static inline const char* name = "cohort.trainer";
};
// What a trainer keeps of its attempt's unacknowledged output (see trainer_actor_state).
constexpr std::size_t max_unacked_log_bytes = 4u << 20;
// `bind_address`: where this node is reached; the attempt's rendezvous store listens there.
caf::behavior trainer_actor(caf::stateful_actor<trainer_actor_state>* self, trainer_setup setup,
                            caf::actor head, std::shared_ptr<node_directory> directory,
                            std::string bind_address, std::shared_ptr<epoch_fence> fence);

struct worker_actor_state {
  worker_setup setup;
  caf::actor trainer;
  std::shared_ptr<std::atomic<std::int64_t>> step;  // the runner's last completed step
  std::chrono::milliseconds heartbeat_every{1000};
  std::shared_ptr<workload_runner> runner;
  ~worker_actor_state() {
    if (runner) runner->cancel();
  }
  static inline const char* name = "cohort.worker";
};
// A worker that runs its workload on a thread of this process.
caf::behavior worker_actor(caf::stateful_actor<worker_actor_state>* self, worker_setup setup,
                           caf::actor trainer, std::shared_ptr<runner_registry> runners);
// The spawner for in-process workers.
worker_spawner in_process_workers(std::shared_ptr<runner_registry> runners);
// The spawner for workers in OS processes of their own, running `program` (cohort-worker), each
// with CUDA_VISIBLE_DEVICES naming its GPUs by the node's `gpu_ids` (see worker_environment).
worker_spawner process_workers(std::string program, std::vector<std::string> gpu_ids,
                               std::int32_t gpu_count);

// The text of a CAF error: its message context if it carries one, else CAF's rendering.
std::string describe(caf::actor_system& sys, const caf::error& err);

}  // namespace cohort::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::reintroduce)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::node_ping)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::adoption_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::preemption_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::begin_drain)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::drain_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::publish_address)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::kill_worker_drill)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::kill_trainer_drill)

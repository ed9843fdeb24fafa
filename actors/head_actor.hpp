// The head actor's state and behavior (head_actor.cpp): it registers nodes, accepts jobs,
// places them and starts each attempt's trainer; its logic is head_state.hpp, its store writes
// go through store_writer.hpp. Owned by its actor; only the actor's handlers touch the state.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "actors/head_state.hpp"
#include "actors/log_sequence.hpp"
#include "actors/messages.hpp"
#include "core/store/cluster_store.hpp"

namespace cohort::actors {

// How many lines of worker output an embedded head (no store) keeps per job for `submit logs`.
constexpr std::size_t max_log_lines_per_job = 10000;

// What a head persists to and how long it waits for trainers after a restart.
struct lease_fence;  // store_writer.hpp

struct head_options {
  std::shared_ptr<core::store::cluster_store> store;  // null: nothing persists (embedded)
  std::int64_t epoch = 0;                             // the lease epoch every write carries
  std::chrono::milliseconds adoption_grace{15000};
  std::chrono::milliseconds lease_ttl{10000};
  // Canonical --storage-root directories: a job naming a path outside every one of them is
  // refused at submit (config/storage_roots.hpp). Empty: no restriction.
  std::vector<std::filesystem::path> storage_roots;
  // Shared with the lease keeper: whoever gives the lease back does it under this (see
  // store_writer.hpp). Null: nobody gives it back but by expiry.
  std::shared_ptr<lease_fence> fence;
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
  caf::actor lease_keeper;  // the only writer of the leader record while this head leads
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

}  // namespace cohort::actors

// The head actor's state and behavior (head_actor.cpp): it registers nodes, accepts jobs,
// places them and starts each attempt's trainer; its logic is head_state.hpp, its store writes
// go through store_writer.hpp. Owned by its actor; only the actor's handlers touch the state.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "actors/attempt_watch.hpp"
#include "actors/head_state.hpp"
#include "actors/job_id_queue.hpp"
#include "actors/leader_session.hpp"
#include "actors/messages.hpp"
#include "actors/node_registry.hpp"
#include "actors/output_hub.hpp"
#include "core/store/cluster_store.hpp"

namespace cohort::actors {

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

// The head actor's state: one plain manager per domain (each with its own tests), wired by the
// handlers of head_actor.cpp, which hold the CAF handles' monitoring and sending:
//   logic     head_state: nodes' records, jobs, admission, placement, the failure policy
//   nodes     node_registry: which node actor speaks for each node name
//   trainers  attempt_watch: which trainer runs which attempt
//   output    output_hub: followers, jobs' output in memory, progress history, stored lines
//   job_ids   job_id_queue: the job id taken ahead in the store, and the submits waiting for one
//   lease     leader_session: while this head may act as leader
struct head_actor_state {
  head_state logic;
  head_options options;
  std::map<std::string, persisted_job_fields> persisted;  // job → what was last written of it
  node_registry<caf::actor, caf::actor_addr> nodes;
  attempt_watch<caf::actor, caf::actor_addr> trainers;
  output_hub<caf::actor> output;
  struct waiting_submit {
    config::job_spec spec;
    std::string spec_json;  // as submitted: what the store keeps
    caf::typed_response_promise<job_accepted> promise;
  };
  job_id_queue<waiting_submit> job_ids;
  leader_session lease{std::chrono::milliseconds{0}, {}};  // set when the actor starts
  // With a store: the detached actor that does the head's store writes (store_writer.hpp).
  caf::actor store_writer;
  caf::actor lease_keeper;  // the only writer of the leader record while this head leads
  static inline const char* name = "cohort.head";
};
caf::behavior head_actor(caf::stateful_actor<head_actor_state>* self, head_options options);

}  // namespace cohort::actors

// The node actor's state and behavior (node_actor.cpp): one per cluster-worker or embedded node;
// it starts trainers and workers linked to itself and drains when told. Owned by its actor.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "actors/epoch_fence.hpp"
#include "actors/messages.hpp"
#include "actors/node_directory.hpp"

namespace cohort::actors {

// How long a draining node waits past the longest run.failure.preemption_grace_s of its jobs
// (begin_drain).
constexpr std::chrono::seconds drain_margin{15};

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

}  // namespace cohort::actors

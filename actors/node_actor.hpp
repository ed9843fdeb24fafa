// The node actor's state and behavior (node_actor.cpp): one per cluster-worker or embedded node;
// it starts trainers and workers linked to itself and drains when told. Owned by its actor.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "actors/epoch_fence.hpp"
#include "actors/messages.hpp"
#include "actors/node_children.hpp"
#include "actors/node_directory.hpp"

namespace cohort::actors {

// How a node runs a worker: an actor with a thread in this process (embedded clusters), or an
// actor standing for a worker OS process (cluster-worker). Called on the node's thread; returns
// the spawned actor, which sends worker_started to `trainer` itself.
using worker_spawner =
    std::function<caf::actor(caf::local_actor* node, const worker_setup&, const caf::actor& trainer)>;

// The node actor's handles beside what it runs and its leaving (node_children.hpp).
struct node_actor_state {
  node_info info;
  caf::actor head;
  std::shared_ptr<node_directory> directory;
  worker_spawner spawn_worker;
  std::shared_ptr<epoch_fence> fence;
  node_children<caf::actor, caf::actor_addr> children;
  static inline const char* name = "cohort.node";
};
// `fence`: the newest leader epoch this node process has seen; head commands of older epochs are
// refused (null: a fence of the node's own).
caf::behavior node_actor(caf::stateful_actor<node_actor_state>* self, node_info info,
                         caf::actor head, std::shared_ptr<node_directory> directory,
                         worker_spawner spawn_worker, std::shared_ptr<epoch_fence> fence);

}  // namespace cohort::actors

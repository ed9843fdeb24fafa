// The in-process worker actor's state and behavior (worker_actor.cpp): one rank of a job running
// its workload on a runner thread of this process (embedded clusters), and the node's spawner
// for such workers. Owned by its actor; the runner thread reaches it by messages only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/node_actor.hpp"
#include "actors/workload_runner.hpp"

namespace cohort::actors {

struct worker_actor_state {
  worker_setup setup;
  caf::actor trainer;
  std::shared_ptr<std::atomic<std::int64_t>> step;  // the runner's last completed step
  std::shared_ptr<core::train::rank_activity> activity;  // what it does besides steps
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

}  // namespace cohort::actors

// How cohort's processes configure CAF's scheduler: work sharing, whose idle threads block on a
// condition variable. CAF 0.17's default (work stealing) polls: after every message each idle
// worker spins 100 times, then sleeps 50 µs 500 times, then wakes every 10 ms while idle, so an
// idle process burns CPU and a busy one with many small messages (heartbeats) burns more.
// Call before the actor_system is made from `cfg`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <thread>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

namespace cohort::actors {

// max_threads 0: one per core (CAF's default); else at most that many (and at most one per core).
inline void configure_scheduler(caf::actor_system_config& cfg, std::size_t max_threads = 0) {
  cfg.set("scheduler.policy", caf::atom("sharing"));
  const std::size_t cores = std::max<std::size_t>(1, std::thread::hardware_concurrency());
  cfg.set("scheduler.max-threads", max_threads == 0 ? cores : std::min(max_threads, cores));
}

}  // namespace cohort::actors

// The trainer actor's state and behavior (trainer_actor.cpp): one attempt of one job, started
// by the node of rank 0. Owned by its actor; only the actor's handlers touch the state.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/epoch_fence.hpp"
#include "actors/hang_detector.hpp"
#include "actors/messages.hpp"
#include "actors/node_directory.hpp"
#include "core/comm/tcp_store_server.hpp"

namespace cohort::actors {

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

}  // namespace cohort::actors

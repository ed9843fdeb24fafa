// The trainer actor (trainer_actor.cpp): one attempt of one job, started by the node of rank 0.
// Its protocol is attempt_state's (plain, tested without CAF); the actor holds what CAF and the
// network need (the head's and the workers' handles, the rendezvous store) and sends what the
// attempt_state returns. Owned by its actor; only the actor's handlers touch the state.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/attempt_state.hpp"
#include "actors/epoch_fence.hpp"
#include "actors/messages.hpp"
#include "actors/node_directory.hpp"
#include "core/comm/tcp_store_server.hpp"

namespace cohort::actors {

struct trainer_actor_state {
  std::optional<attempt_state> attempt;  // set when the behavior starts
  caf::actor head;
  std::vector<caf::actor> workers;  // by rank; null until started
  std::map<caf::actor_addr, std::int32_t> rank_of;
  std::chrono::milliseconds hang_check_every{1000};
  // The rendezvous store the attempt's workers bootstrap their collective group through.
  std::unique_ptr<core::comm::tcp_store_server> store;
  std::string store_secret;  // the store's (raw bytes); handed to this attempt's workers only
  static inline const char* name = "cohort.trainer";
};
// `bind_address`: where this node is reached; the attempt's rendezvous store listens there.
caf::behavior trainer_actor(caf::stateful_actor<trainer_actor_state>* self, trainer_setup setup,
                            caf::actor head, std::shared_ptr<node_directory> directory,
                            std::string bind_address, std::shared_ptr<epoch_fence> fence);

}  // namespace cohort::actors

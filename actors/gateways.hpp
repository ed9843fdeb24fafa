// The gateway actors that connect processes: the head's serves nodes and clients on a CURVE
// ROUTER socket; a cluster-worker's connects its node to the head on a DEALER socket. Both route
// envelopes between local actors and proxies of remote ones (bridge.hpp) and watch liveness.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <caf/actor.hpp>

#include "net/credentials.hpp"
#include "net/wire_client.hpp"
#include "net/wire_server.hpp"

namespace cohort::actors {

struct liveness_options {
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds node_timeout{6000};  // a node silent this long is lost
};

// Spawns the head's gateway: it starts `server_options` on its own, exports `head` as
// "head/head", and serves clients' requests by asking `head`. Throws what the server throws.
caf::actor spawn_head_gateway(caf::actor_system& sys, caf::actor head,
                              net::server_options options, liveness_options liveness,
                              std::uint16_t* bound_port);

// A node process's gateway and the node actor it serves.
struct node_process {
  caf::actor gateway;
  caf::actor node;
  std::shared_ptr<net::wire_client> client;  // the link to the head (its state: has it joined?)
};
// Spawns a node process's gateway for node `node_name`: calls `make_node(head_proxy)` (at once,
// on this thread) for the node actor, exports it as "node:<name>/node", and connects. After
// every (re)connect the node introduces itself again.
node_process spawn_node_gateway(caf::actor_system& sys, const std::string& node_name,
                                net::client_options options, liveness_options liveness,
                                std::function<caf::actor(caf::actor head_proxy)> make_node);

}  // namespace cohort::actors

// The gateway actors that connect processes: the head's serves nodes and clients on a CURVE
// ROUTER socket; a cluster-worker's connects its node to the head on a DEALER socket. Both route
// envelopes between local actors and proxies of remote ones (bridge.hpp) and watch liveness.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include "net/bridge_messages.hpp"
#include "net/credentials.hpp"
#include "net/head_addresses.hpp"
#include "net/wire_client.hpp"
#include "net/wire_server.hpp"

namespace cohort::actors {

struct liveness_options {
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds node_timeout{6000};  // a node silent this long is lost
};

// Spawns the head's gateway: it starts `server_options` on its own, exports `head` as
// "head/head", and serves clients' requests by asking `head`. Answers every process_hello with
// `welcome` (this head's address and epoch) while it leads. Throws what the server throws.
caf::actor spawn_head_gateway(caf::actor_system& sys, caf::actor head,
                              net::server_options options, liveness_options liveness,
                              std::uint16_t* bound_port, net::process_welcome welcome);

// Where a node process looks for the leading head: the configured addresses and the store's
// leader record (net::leader_search), and how long it waits on one head before trying another.
struct head_search_options {
  std::vector<std::string> addresses;     // --address, in order
  net::leader_record_reader store_leader;  // empty: the node does not share the store
  // Not registered with a leader (no connection, or a standby that names no leader) this long:
  // try the next head.
  std::chrono::milliseconds patience{3000};
  std::function<void(const std::string&)> report;  // a line for the log when the node (re)joins
};

// The node's registration with the leader, as the gateway last saw it. Thread-safe.
class node_join {
 public:
  // Waits until a leader welcomed the node, or the timeout passes; true when one did.
  bool wait_for_welcome(std::chrono::milliseconds timeout) const;
  std::optional<net::process_welcome> welcome() const;
  // The link to the head tried last and what the last standby said ("" when none answered).
  net::link_status link() const;
  std::string address() const;
  std::string standby_said() const;

  // The gateway's side.
  void set_client(std::shared_ptr<net::wire_client> client, std::string address);
  void welcomed(net::process_welcome w);
  void lost();
  void standby(std::string message);
  void stop_client();  // the gateway ended: its link goes with it

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::shared_ptr<net::wire_client> client_;
  std::string address_;
  std::optional<net::process_welcome> welcome_;
  std::string standby_said_;
};

// A node process's gateway and the node actor it serves.
struct node_process {
  caf::actor gateway;
  caf::actor node;
  std::shared_ptr<node_join> join;  // whether (and with which leader) the node is registered
};
// Spawns a node process's gateway for node `node_name`: calls `make_node(head_proxy)` (at once,
// on this thread) for the node actor, exports it as "node:<name>/node", and connects to the first
// head of `search` (options' keys; its address is replaced). Once a head welcomes the process
// (it leads) the node introduces itself, again after every reconnect. A standby's not_leader
// sends the gateway to the leader it names; a head silent for search.patience to the next one.
node_process spawn_node_gateway(caf::actor_system& sys, const std::string& node_name,
                                net::client_options options, liveness_options liveness,
                                head_search_options search,
                                std::function<caf::actor(caf::actor head_proxy)> make_node);

}  // namespace cohort::actors

// A standby cluster-head's answer on its own address while another head leads: every request and
// node hello gets net::not_leader naming the leader from the store's lease, so clients and nodes
// that try this address are sent on instead of timing out. Owned by cluster-head's main thread;
// answers on its wire server's loop thread.
#pragma once

#include <memory>
#include <mutex>
#include <optional>

#include "core/store/leader_lease.hpp"
#include "net/bridge_messages.hpp"
#include "net/wire_server.hpp"

namespace cohort::tools {

class standby_responder {
 public:
  explicit standby_responder(net::server_options options) : options_(std::move(options)) {}
  ~standby_responder() { stop(); }

  // Binds and starts answering with who leads (`leader`, the store's current lease). Throws what
  // net::wire_server::start throws (port taken, bad address).
  void start(const std::optional<core::store::lease_record>& leader);
  // The store's lease as last read: the leader named from now on.
  void update(const std::optional<core::store::lease_record>& leader);
  // Stops answering and frees the port (the ZeroMQ context is gone when this returns).
  void stop();

 private:
  net::server_options options_;
  std::mutex mutex_;
  net::not_leader answer_;
  std::unique_ptr<net::wire_server> server_;
};

}  // namespace cohort::tools

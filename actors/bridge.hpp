// The bridge between this process's actors and actors in other processes. Remote endpoints appear
// here as proxy actors (send to one and the message travels; monitor one and its remote death
// arrives as a down message); local actors that talk over the wire are exported under an endpoint
// name. The head's and the node's gateway actors own one bridge_state each.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "net/bridge_messages.hpp"
#include "net/codec.hpp"

namespace cohort::actors {

// A message a proxy hands its gateway: for remote endpoint `to`, from local actor `sender`.
struct outgoing_message {
  std::string to;
  caf::strong_actor_ptr sender;
  caf::message content;
};
// A decoded frame from the transport thread, with the peer's routing id (empty on a node).
struct incoming_frame {
  std::string routing_id;
  caf::message content;
};
// Periodic work of a gateway (heartbeats, liveness checks).
struct gateway_tick {};
// Tells a proxy its remote endpoint is gone: it ends with `reason` (its monitors learn why), or
// normally when the reason is empty (the remote actor finished).
struct proxy_quit {
  std::string reason;
};
// Proxy → gateway, first thing: the gateway knows every proxy, wherever it was spawned.
struct proxy_hello {};
// Gateway → proxy: answer once everything queued before this is passed on. Proxy → gateway: done.
// An exported actor's death travels only after its last messages, which may still sit in proxies.
struct proxy_flush {
  std::uint64_t token = 0;
};
struct proxy_flushed {
  std::uint64_t token = 0;
};

// The proxy of a remote endpoint: forwards everything it receives to the gateway.
caf::behavior remote_proxy(caf::event_based_actor* self, std::string endpoint, caf::actor gateway);

class bridge_state {
 public:
  bridge_state(std::string process, std::shared_ptr<const net::wire_codec> codec)
      : process_(std::move(process)), codec_(std::move(codec)) {}

  const std::string& process() const { return process_; }
  const net::wire_codec& codec() const { return *codec_; }

  // Makes a local actor reachable as "<process>/<name>".
  void export_as(caf::local_actor* self, const std::string& name, const caf::actor& actor);
  // The endpoint of a local actor, exporting (and monitoring) it on first use.
  std::string endpoint_of(caf::local_actor* self, const caf::strong_actor_ptr& actor);
  // The proxy of a remote endpoint, spawned on first use.
  caf::actor proxy_for(caf::local_actor* self, const std::string& endpoint);

  // A routed frame addressed to a local endpoint: decodes it and delivers it from the sender's
  // proxy. Returns false (and says why in `problem`) when the frame or the endpoint is bad.
  bool deliver(caf::local_actor* self, const std::string& to, const std::string& from,
               const std::string& payload, std::string& problem);
  // The frame of a routed envelope for `out`, or empty (problem set) when it cannot be encoded.
  std::string encode_outgoing(caf::local_actor* self, const outgoing_message& out,
                              std::string& problem);

  // A remote endpoint ended: its proxy ends with `reason` (empty: it finished normally).
  void proxy_down(const std::string& endpoint, const std::string& reason);
  // Every proxy of a remote process ends with `reason` (the process is lost).
  void process_lost(const std::string& process, const std::string& reason);
  // A down message about a local actor or a proxy: forgets it. An exported actor's death is for
  // its peers to hear, after its last messages: every proxy is asked to flush first, and the
  // endpoint_down is returned (here or from on_flushed) once the last one answered or died.
  // `reason` describes msg.reason (empty when the actor finished normally).
  std::vector<net::endpoint_down> on_down(const caf::down_msg& msg, const std::string& reason);
  std::vector<net::endpoint_down> on_flushed(const proxy_flushed& f, const caf::actor_addr& proxy);
  // A proxy said hello (see proxy_hello): it takes part in flushes from now on.
  void add_proxy(caf::local_actor* self, const caf::actor& proxy);

 private:
  std::string process_;
  std::shared_ptr<const net::wire_codec> codec_;
  std::map<std::string, caf::actor> exports_;
  std::map<caf::actor_addr, std::string> export_names_;
  std::map<std::string, caf::actor> proxies_;
  std::map<caf::actor_addr, std::string> proxy_names_;
  std::map<caf::actor_addr, caf::actor> all_proxies_;  // every live proxy that said hello
  struct pending_down {
    net::endpoint_down down;
    std::set<caf::actor_addr> waiting;  // proxies that have not flushed yet
  };
  std::map<std::uint64_t, pending_down> pending_downs_;
  std::uint64_t next_token_ = 0;
  // Removes `proxy` from every pending death (its flush will never come) and returns those complete.
  std::vector<net::endpoint_down> stop_waiting_for(const caf::actor_addr& proxy);
};

}  // namespace cohort::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::outgoing_message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::incoming_frame)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::gateway_tick)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::proxy_quit)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::proxy_hello)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::proxy_flush)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::proxy_flushed)

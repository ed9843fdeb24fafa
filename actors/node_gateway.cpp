// A node process's gateway actor (see gateways.hpp): connects the node to the head on a CURVE
// DEALER socket, routes envelopes, sends heartbeats and re-introduces the node after reconnects.
#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "actors/bridge.hpp"
#include "actors/gateways.hpp"
#include "actors/wire_protocol.hpp"
#include "net/bridge_messages.hpp"

namespace cohort::actors {

namespace {

struct node_gateway_state {
  std::unique_ptr<bridge_state> bridge;
  std::shared_ptr<net::wire_client> client;
  caf::actor node;
  liveness_options liveness;
  std::uint64_t seq = 0;
  static inline const char* name = "cohort.node_gateway";
};
using node_gw = caf::stateful_actor<node_gateway_state>*;

struct link_change {
  net::link_state state;
};
struct attach_node {
  caf::actor node;
};

}  // namespace
}  // namespace cohort::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::link_change)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::attach_node)

namespace cohort::actors {
namespace {

caf::behavior node_gateway(node_gw self, std::string node_name,
                           std::shared_ptr<net::wire_client> client, liveness_options liveness) {
  auto& st = self->state;
  st.bridge = std::make_unique<bridge_state>("node:" + node_name, make_wire_codec());
  st.liveness = liveness;
  st.client = std::move(client);
  self->set_down_handler([=](caf::down_msg& msg) {
    const auto reason = msg.reason ? describe(self->system(), msg.reason) : "";
    for (const auto& d : self->state.bridge->on_down(msg, reason)) self->state.client->send(d);
  });
  self->attach_functor([client = st.client] { client->stop(); });
  self->send(self, gateway_tick{});
  return {
      [=](const attach_node& a) {
        auto& st = self->state;
        st.node = a.node;
        st.bridge->export_as(self, "node", st.node);
        self->link_to(st.node);
      },
      [=](const link_change& change) {
        if (change.state != net::link_state::connected) return;
        auto& st = self->state;
        st.client->send(net::process_hello{st.bridge->process()});
        if (st.node) self->send(st.node, reintroduce{});
      },
      [=](const incoming_frame& in) {
        auto& st = self->state;
        const auto& msg = in.content;
        if (msg.match_element<net::routed>(0)) {
          const auto& r = msg.get_as<net::routed>(0);
          std::string problem;
          if (!st.bridge->deliver(self, r.to, r.from, r.payload, problem))
            st.client->send(net::endpoint_down{r.to, problem});
        } else if (msg.match_element<net::endpoint_down>(0)) {
          const auto& d = msg.get_as<net::endpoint_down>(0);
          st.bridge->proxy_down(d.endpoint, d.reason);
        }
      },
      [=](const outgoing_message& out) {
        std::string problem;
        auto frame = self->state.bridge->encode_outgoing(self, out, problem);
        if (frame.empty()) {
          self->state.bridge->proxy_down(out.to, problem);
          return;
        }
        self->state.client->send_frame(std::move(frame));
      },
      [=](proxy_hello) {
        self->state.bridge->add_proxy(self, caf::actor_cast<caf::actor>(self->current_sender()));
      },
      [=](const proxy_flushed& f) {
        const auto proxy = caf::actor_cast<caf::actor_addr>(self->current_sender());
        for (const auto& d : self->state.bridge->on_flushed(f, proxy)) self->state.client->send(d);
      },
      [=](gateway_tick) {
        auto& st = self->state;
        st.client->send(net::heartbeat{st.bridge->process(), ++st.seq});
        self->delayed_send(self, st.liveness.heartbeat_interval, gateway_tick{});
      },
  };
}

}  // namespace

node_process spawn_node_gateway(caf::actor_system& sys, const std::string& node_name,
                                net::client_options options, liveness_options liveness,
                                std::function<caf::actor(caf::actor head_proxy)> make_node) {
  auto gateway = std::make_shared<caf::actor>();
  auto client = std::make_shared<net::wire_client>(
      make_wire_codec(), std::move(options),
      [gateway](caf::message msg) { caf::anon_send(*gateway, incoming_frame{"", std::move(msg)}); },
      [gateway](net::link_state s) { caf::anon_send(*gateway, link_change{s}); });
  *gateway = sys.spawn(node_gateway, node_name, client, liveness);
  auto node = make_node(sys.spawn(remote_proxy, "head/head", *gateway));
  // Enqueued before the client starts, so before any link change.
  caf::anon_send(*gateway, attach_node{node});
  try {
    client->start();
  } catch (...) {
    caf::anon_send_exit(*gateway, caf::exit_reason::user_shutdown);
    throw;
  }
  return {*gateway, node, client};
}

}  // namespace cohort::actors

// A node process's gateway actor (see gateways.hpp): connects the node to the leading head on a
// CURVE DEALER socket, routes envelopes, sends heartbeats, follows standbys' redirects, moves to
// another head when its head falls silent, and re-introduces the node to every leader that
// welcomes it.
#include <unistd.h>

#include <cstdio>
#include <random>

#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "actors/bridge.hpp"
#include "actors/gateways.hpp"
#include "actors/wire_protocol.hpp"
#include "net/bridge_messages.hpp"

namespace cohort::actors {

bool node_join::wait_for_welcome(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [this] { return welcome_.has_value(); });
}
std::optional<net::process_welcome> node_join::welcome() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return welcome_;
}
net::link_status node_join::link() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return client_ ? client_->status() : net::link_status{};
}
std::string node_join::address() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return address_;
}
std::string node_join::standby_said() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return standby_said_;
}
void node_join::set_client(std::shared_ptr<net::wire_client> client, std::string address) {
  std::lock_guard<std::mutex> lock(mutex_);
  client_ = std::move(client);
  address_ = std::move(address);
}
void node_join::welcomed(net::process_welcome w) {
  std::lock_guard<std::mutex> lock(mutex_);
  welcome_ = std::move(w);
  changed_.notify_all();
}
void node_join::lost() {
  std::lock_guard<std::mutex> lock(mutex_);
  welcome_.reset();
}
void node_join::stop_client() {
  std::shared_ptr<net::wire_client> client;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    client = client_;
  }
  if (client) client->stop();
}
void node_join::standby(std::string message) {
  std::lock_guard<std::mutex> lock(mutex_);
  standby_said_ = std::move(message);
}

namespace {

using clock = std::chrono::steady_clock;

// A process_hello incarnation: the pid and 64 random bits, so a restarted node never repeats one.
std::string new_incarnation() {
  std::random_device rd;
  const std::uint64_t r = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char text[48];
  std::snprintf(text, sizeof text, "%d-%016llx", static_cast<int>(::getpid()), static_cast<unsigned long long>(r));
  return text;
}

struct node_gateway_state {
  std::unique_ptr<bridge_state> bridge;
  std::shared_ptr<const net::wire_codec> codec;
  net::client_options options;  // keys; address = the head tried now
  std::shared_ptr<net::wire_client> client;
  std::uint64_t generation = 0;  // of `client`: frames and link changes of older ones are stale
  std::unique_ptr<net::leader_search> search;
  head_search_options search_options;
  std::shared_ptr<node_join> join;
  bool welcomed = false;
  clock::time_point waiting_since = clock::now();  // not welcomed since
  int redirects = 0;                                // followed since the last welcome
  std::string left_silent;  // the head last left because it fell silent: redirects there wait
  bool connected = false;   // to the head tried now (a standby answers too)
  caf::actor node;
  liveness_options liveness;
  std::uint64_t seq = 0;
  std::string incarnation = new_incarnation();  // this process's, for every process_hello
  static inline const char* name = "cohort.node_gateway";
};
using node_gw = caf::stateful_actor<node_gateway_state>*;

struct link_change {
  net::link_state state;
  std::uint64_t generation;
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

// Replaces the link with one to `address` (the old one is stopped: its late frames are stale).
void connect_to(node_gw self, const std::string& address) {
  auto& st = self->state;
  if (st.client) st.client->stop();
  const auto generation = ++st.generation;
  st.options.address = address;
  caf::actor gateway = caf::actor_cast<caf::actor>(self);
  st.client = std::make_shared<net::wire_client>(
      st.codec, st.options,
      [gateway, generation](caf::message msg) {
        caf::anon_send(gateway, incoming_frame{std::to_string(generation), std::move(msg)});
      },
      [gateway, generation](net::link_state s) { caf::anon_send(gateway, link_change{s, generation}); });
  st.welcomed = false;
  st.waiting_since = clock::now();
  st.join->lost();
  st.join->set_client(st.client, address);
  st.connected = false;
  try {
    st.client->start();
  } catch (const std::exception& e) {
    // A bad address in the store's leader record: say so; gateway_tick moves on after patience.
    if (st.search_options.report) st.search_options.report("cannot connect to " + address + ": " + e.what());
  }
}

void report(node_gw self, const std::string& line) {
  if (self->state.search_options.report) self->state.search_options.report(line);
}

void on_attach(node_gw self, const attach_node& a) {
  auto& st = self->state;
  st.node = a.node;
  st.bridge->export_as(self, "node", st.node);
  self->link_to(st.node);
  // Nothing to try yet (only a store, and no live lease in it): gateway_tick tries later.
  if (auto first = st.search->first(); !first.empty()) connect_to(self, first);
}

// The link to the head came up (the head answers the hello with a welcome when it leads, with
// not_leader when it does not) or went down.
void on_link_change(node_gw self, const link_change& change) {
  auto& st = self->state;
  if (change.generation != st.generation) return;
  st.connected = change.state == net::link_state::connected;
  if (change.state == net::link_state::connected) {
    st.client->send(net::process_hello{st.bridge->process(), st.incarnation});
  } else if (st.welcomed) {
    st.welcomed = false;
    st.waiting_since = clock::now();
    st.join->lost();
  }
}

void on_welcome(node_gw self, const net::process_welcome& w) {
  auto& st = self->state;
  const bool again = st.welcomed;
  st.welcomed = true;
  st.redirects = 0;
  st.left_silent.clear();
  st.search->found(st.options.address);
  st.join->welcomed(w);
  if (!again)
    report(self, "joined the leader at " + st.options.address + " (epoch " + std::to_string(w.epoch) + ")");
  if (st.node) self->send(st.node, reintroduce{w.epoch});
}

// The head declared this process lost (its heartbeats stopped reaching it): hello again, then the
// welcome re-introduces the node and its trainers, judged afresh.
void on_unknown_process(node_gw self, const net::unknown_process& u) {
  auto& st = self->state;
  if (!st.welcomed) return;  // a hello is already on its way
  st.welcomed = false;
  st.waiting_since = clock::now();
  st.join->lost();
  report(self, u.message + "; saying hello again");
  st.client->send(net::process_hello{st.bridge->process(), st.incarnation});
}

// A standby answered: follow the leader it names (bounded); else stay until patience runs out
// (gateway_tick).
void on_not_leader(node_gw self, const net::not_leader& n) {
  auto& st = self->state;
  st.join->standby(st.options.address + ": " + n.message);
  if (!n.leader.empty() && n.leader != st.options.address && n.leader != st.left_silent &&
      st.redirects < net::leader_search::default_max_redirects) {
    ++st.redirects;
    report(self, st.options.address + " is a standby; going to the leader at " + n.leader);
    connect_to(self, n.leader);
  }
}

void on_frame(node_gw self, const incoming_frame& in) {
  auto& st = self->state;
  if (in.routing_id != std::to_string(st.generation)) return;  // from a head left behind
  const auto& msg = in.content;
  if (msg.match_element<net::process_welcome>(0)) {
    on_welcome(self, msg.get_as<net::process_welcome>(0));
  } else if (msg.match_element<net::unknown_process>(0)) {
    on_unknown_process(self, msg.get_as<net::unknown_process>(0));
  } else if (msg.match_element<net::not_leader>(0)) {
    on_not_leader(self, msg.get_as<net::not_leader>(0));
  } else if (msg.match_element<net::routed>(0)) {
    const auto& r = msg.get_as<net::routed>(0);
    std::string problem;
    if (!st.bridge->deliver(self, r.to, r.from, r.payload, problem))
      st.client->send(net::endpoint_down{r.to, problem});
  } else if (msg.match_element<net::endpoint_down>(0)) {
    const auto& d = msg.get_as<net::endpoint_down>(0);
    st.bridge->proxy_down(d.endpoint, d.reason);
  }
}

void on_outgoing(node_gw self, const outgoing_message& out) {
  std::string problem;
  auto frame = self->state.bridge->encode_outgoing(self, out, problem);
  if (frame.empty() || !self->state.client) {
    self->state.bridge->proxy_down(out.to, frame.empty() ? problem : "the node has no link to a head yet");
    return;
  }
  self->state.client->send_frame(std::move(frame));
}

// Where to look for the leader when the one this node follows seems gone. The store names a newer
// leader elsewhere while this head still seems to lead (it was stopped, or is cut off): go now
// rather than wait for the link to time out. No leader here past patience: the store's live
// leader, else the next configured address; a standby that answers is left only for a leader the
// store names (it may be the one about to take over: its reconnect then brings the welcome). A
// head whose keys do not match ours is another cluster's: the node keeps trying the address it
// was given (and cluster-worker reports the mismatch) rather than look past it.
void look_for_leader(node_gw self) {
  auto& st = self->state;
  const auto link = st.client ? st.client->status().state : net::link_state::connecting;
  const bool mismatch = link == net::link_state::refused || link == net::link_state::handshake_failed;
  if (st.welcomed && st.search_options.store_leader) {
    if (auto leader = st.search_options.store_leader(); leader && *leader != st.options.address) {
      report(self, "the store names the leader at " + *leader + "; leaving " + st.options.address);
      st.left_silent = st.options.address;
      connect_to(self, *leader);
    }
  }
  if (st.welcomed || mismatch || clock::now() - st.waiting_since < st.search_options.patience) return;
  st.redirects = 0;
  auto next = st.search->rotate(st.options.address);
  if (st.connected && !(st.search_options.store_leader && st.search_options.store_leader() == next))
    next = st.options.address;
  if (!next.empty() && next != st.options.address) {
    if (!st.connected && !st.options.address.empty()) st.left_silent = st.options.address;
    report(self, "no leader at " + st.options.address + "; trying " + next);
    connect_to(self, next);
  } else {
    st.waiting_since = clock::now();
  }
}

void on_tick(node_gw self) {
  auto& st = self->state;
  if (st.client) st.client->send(net::heartbeat{st.bridge->process(), ++st.seq});
  look_for_leader(self);
  self->delayed_send(self, st.liveness.heartbeat_interval, gateway_tick{});
}

caf::behavior node_gateway(node_gw self, std::string node_name, net::client_options options,
                           liveness_options liveness, head_search_options search,
                           std::shared_ptr<node_join> join) {
  auto& st = self->state;
  st.bridge = std::make_unique<bridge_state>("node:" + node_name, make_wire_codec());
  st.codec = make_wire_codec();
  st.options = std::move(options);
  st.liveness = liveness;
  st.search = std::make_unique<net::leader_search>(search.addresses, search.store_leader);
  st.search_options = std::move(search);
  st.join = std::move(join);
  self->set_down_handler([=](caf::down_msg& msg) {
    const auto reason = msg.reason ? describe(self->system(), msg.reason) : "";
    if (!self->state.client) return;
    for (const auto& d : self->state.bridge->on_down(msg, reason)) self->state.client->send(d);
  });
  self->attach_functor([join = st.join] { join->stop_client(); });
  self->send(self, gateway_tick{});
  return {
      [=](const attach_node& a) { on_attach(self, a); },
      [=](const link_change& change) { on_link_change(self, change); },
      [=](const incoming_frame& in) { on_frame(self, in); },
      [=](const outgoing_message& out) { on_outgoing(self, out); },
      [=](proxy_hello) {
        self->state.bridge->add_proxy(self, caf::actor_cast<caf::actor>(self->current_sender()));
      },
      [=](const proxy_flushed& f) {
        const auto proxy = caf::actor_cast<caf::actor_addr>(self->current_sender());
        for (const auto& d : self->state.bridge->on_flushed(f, proxy))
          if (self->state.client) self->state.client->send(d);
      },
      [=](gateway_tick) { on_tick(self); },
  };
}

}  // namespace

node_process spawn_node_gateway(caf::actor_system& sys, const std::string& node_name,
                                net::client_options options, liveness_options liveness,
                                head_search_options search,
                                std::function<caf::actor(caf::actor head_proxy)> make_node) {
  auto join = std::make_shared<node_join>();
  // Throws net_error for an empty search before anything starts.
  net::leader_search check(search.addresses, search.store_leader);
  auto gateway = sys.spawn(node_gateway, node_name, std::move(options), liveness,
                           std::move(search), join);
  auto node = make_node(sys.spawn(remote_proxy, "head/head", gateway));
  // The gateway connects once it has the node, so the node is there for the first welcome.
  caf::anon_send(gateway, attach_node{node});
  return {gateway, node, join};
}

}  // namespace cohort::actors

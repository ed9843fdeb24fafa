// The head's gateway actor (see gateways.hpp): serves nodes and clients on the CURVE ROUTER
// socket, routes envelopes between processes and declares nodes lost when they fall silent.
#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "actors/bridge.hpp"
#include "actors/client_protocol.hpp"
#include "actors/gateways.hpp"
#include "actors/wire_protocol.hpp"
#include "net/bridge_messages.hpp"

namespace cohort::actors {

namespace {

using clock = std::chrono::steady_clock;
constexpr auto client_request_timeout = std::chrono::seconds(30);


struct head_gateway_state {
  std::unique_ptr<bridge_state> bridge;
  std::shared_ptr<net::wire_server> server;
  caf::actor head;
  liveness_options liveness;
  std::map<std::string, std::string> routing_of_process;  // process → routing id
  std::map<std::string, std::string> process_of_routing;  // routing id → process
  std::map<std::string, clock::time_point> last_seen;     // by process
  std::map<std::string, std::string> incarnation_of_process;
  net::process_welcome welcome;  // this head's address and epoch, for every process_hello
  std::string stepping_down;  // why the head actor ended (it lost the leadership); "" while it leads
  static inline const char* name = "cohort.head_gateway";
};
using head_gw = caf::stateful_actor<head_gateway_state>*;

// The job's record in the reply to a follow request.
const job_record& record_of(const job_record& r) { return r; }
const job_record& record_of(const followed_logs& r) { return r.record; }

// Streams a followed job's events to one client until the job ends: the reply to the follow
// request (Call::reply: the job's record, or its record and output so far), then every job_event.
template <class Call>
caf::behavior client_follower(caf::event_based_actor* self, caf::actor head,
                              std::shared_ptr<net::wire_server> server, std::string routing_id,
                              typename Call::request request) {
  using reply = typename Call::reply;
  self->request(head, client_request_timeout, std::move(request))
      .then(
          [=](reply& r) {
            const bool ended = is_terminal(record_of(r).state);
            server->send(routing_id, r);
            if (ended) self->quit();
          },
          [=](caf::error& err) {
            server->send(routing_id, net::request_failed{describe(self->system(), err)});
            self->quit();
          });
  return {
      [=](const job_event& e) {
        server->send(routing_id, e);
        if (is_terminal(e.record.state)) self->quit();
      },
  };
}

template <class Request, class Reply>
void serve(head_gw self, const std::string& routing_id, const Request& req) {
  auto server = self->state.server;
  self->request(self->state.head, client_request_timeout, req)
      .then([=](Reply& reply) { server->send(routing_id, reply); },
            [=](caf::error& err) {
              // A head that ended meanwhile: say why, not "request receiver down".
              const auto& why = self->state.stepping_down;
              server->send(routing_id,
                           net::request_failed{why.empty() ? describe(self->system(), err) : why});
            });
}

// Exported actors' deaths, to every connected process.
void broadcast_downs(head_gw self, const std::vector<net::endpoint_down>& downs) {
  for (const auto& d : downs)
    for (const auto& [process, routing] : self->state.routing_of_process) self->state.server->send(routing, d);
}

// A process this head does not know (never said hello, or was declared lost when its heartbeats
// stopped, and is heard again once its link healed): it is told to say hello again. Its frame is
// dropped.
void ask_for_hello(head_gw self, const std::string& routing_id, const std::string& process) {
  self->state.server->send(routing_id,
                           net::unknown_process{process, "the head at " + self->state.welcome.head_address +
                                                             " does not know " + process +
                                                             " (declared lost after its heartbeats stopped)"});
}

// A process says hello (first, or again): registered under this connection, welcomed when this
// head leads (a node that followed a list or a redirect stops searching). A process that restarted
// before its silence was noticed: what ran in the old one is gone.
void on_process_hello(head_gw self, const std::string& routing_id, const net::process_hello& hello) {
  auto& st = self->state;
  auto& incarnation = st.incarnation_of_process[hello.process];
  if (!incarnation.empty() && incarnation != hello.incarnation && st.last_seen.count(hello.process) != 0) {
    st.bridge->process_lost(hello.process, hello.process + " lost: it restarted (a new process said hello)");
    st.last_seen.erase(hello.process);
  }
  incarnation = hello.incarnation;
  if (auto old = st.routing_of_process.find(hello.process); old != st.routing_of_process.end())
    st.process_of_routing.erase(old->second);
  st.routing_of_process[hello.process] = routing_id;
  st.process_of_routing[routing_id] = hello.process;
  st.last_seen[hello.process] = clock::now();
  if (st.stepping_down.empty()) st.server->send(routing_id, st.welcome);
}

// A frame routed by `process` (which said hello on this connection): only as itself; to this head's
// actors, or on to the process it is for.
void on_routed(head_gw self, const std::string& routing_id, const std::string& process, const net::routed& r) {
  auto& st = self->state;
  if (net::process_of(r.from) != process) return;
  st.last_seen[process] = clock::now();
  auto target = net::process_of(r.to);
  if (target == st.bridge->process()) {
    std::string problem;
    if (!st.bridge->deliver(self, r.to, r.from, r.payload, problem))
      st.server->send(routing_id, net::endpoint_down{r.to, problem});
    return;
  }
  auto peer = st.routing_of_process.find(target);
  if (peer == st.routing_of_process.end()) {
    st.server->send(routing_id, net::endpoint_down{r.to, "process " + target + " is not connected"});
    return;
  }
  st.server->send(peer->second, r);
}

void head_incoming(head_gw self, const incoming_frame& in) {
  auto& st = self->state;
  const auto& msg = in.content;
  auto known = st.process_of_routing.find(in.routing_id);
  if (msg.match_element<net::process_hello>(0)) {
    on_process_hello(self, in.routing_id, msg.get_as<net::process_hello>(0));
    return;
  }
  if (msg.match_element<net::heartbeat>(0)) {
    if (known != st.process_of_routing.end())
      st.last_seen[known->second] = clock::now();
    else
      ask_for_hello(self, in.routing_id, msg.get_as<net::heartbeat>(0).process);
    return;
  }
  if (msg.match_element<net::routed>(0)) {
    if (known == st.process_of_routing.end())
      ask_for_hello(self, in.routing_id, net::process_of(msg.get_as<net::routed>(0).from));
    else
      on_routed(self, in.routing_id, known->second, msg.get_as<net::routed>(0));
    return;
  }
  if (msg.match_element<net::endpoint_down>(0)) {
    const auto& d = msg.get_as<net::endpoint_down>(0);
    if (known == st.process_of_routing.end() || net::process_of(d.endpoint) != known->second) return;
    st.bridge->proxy_down(d.endpoint, d.reason);
    for (const auto& [process, routing] : st.routing_of_process)
      if (routing != in.routing_id) st.server->send(routing, d);
    return;
  }
  // Client requests.
  if (!st.stepping_down.empty()) {
    st.server->send(in.routing_id, net::request_failed{st.stepping_down});
    return;
  }
  // Exactly the requests of the client table, each answered with its reply type.
  bool served = false;
  for_each_client_call([&](auto call) {
    using call_type = decltype(call);
    using request = typename call_type::request;
    if (served || !msg.match_element<request>(0)) return;
    served = true;
    if constexpr (call_type::kind == call_kind::follow)
      self->spawn(client_follower<call_type>, st.head, st.server, in.routing_id,
                  msg.get_as<request>(0));
    else
      serve<request, typename call_type::reply>(self, in.routing_id, msg.get_as<request>(0));
  });
  if (!served)
    st.server->send(in.routing_id,
                    net::request_failed{"the head does not serve " + to_string(msg)});
}

void head_tick(head_gw self) {
  auto& st = self->state;
  const auto now = clock::now();
  for (auto it = st.last_seen.begin(); it != st.last_seen.end();) {
    if (now - it->second <= st.liveness.node_timeout) {
      ++it;
      continue;
    }
    auto process = it->first;
    auto seconds = std::chrono::duration<double>(now - it->second).count();
    self->send(st.head, process_silent{process});  // before its proxies' downs (process_silent)
    st.bridge->process_lost(process, process + " lost: no heartbeat for " +
                                         std::to_string(static_cast<int>(seconds)) + " s");
    if (auto r = st.routing_of_process.find(process); r != st.routing_of_process.end()) {
      st.process_of_routing.erase(r->second);
      st.routing_of_process.erase(r);
    }
    it = st.last_seen.erase(it);
  }
  self->delayed_send(self, st.liveness.heartbeat_interval, gateway_tick{});
}

caf::behavior head_gateway(head_gw self, caf::actor head, std::shared_ptr<net::wire_server> server,
                           liveness_options liveness, net::process_welcome welcome) {
  auto& st = self->state;
  st.welcome = std::move(welcome);
  st.bridge = std::make_unique<bridge_state>("head", make_wire_codec());
  st.head = head;
  st.liveness = liveness;
  st.server = std::move(server);
  st.bridge->export_as(self, "head", head);
  self->set_down_handler([=](caf::down_msg& msg) {
    const auto reason = msg.reason ? describe(self->system(), msg.reason) : "";
    if (msg.source == self->state.head.address())
      self->state.stepping_down = reason.empty() ? "this head is shutting down" : reason;
    broadcast_downs(self, self->state.bridge->on_down(msg, reason));
  });
  self->attach_functor([server = st.server] { server->stop(); });
  self->send(self, gateway_tick{});
  return {
      [=](const incoming_frame& in) { head_incoming(self, in); },
      [=](const outgoing_message& out) {
        std::string problem;
        auto frame = self->state.bridge->encode_outgoing(self, out, problem);
        auto peer = self->state.routing_of_process.find(net::process_of(out.to));
        if (frame.empty() || peer == self->state.routing_of_process.end()) {
          self->state.bridge->proxy_down(
              out.to, frame.empty() ? problem : net::process_of(out.to) + " is not connected");
          return;
        }
        self->state.server->send_frame(peer->second, std::move(frame));
      },
      [=](proxy_hello) {
        self->state.bridge->add_proxy(self, caf::actor_cast<caf::actor>(self->current_sender()));
      },
      [=](const proxy_flushed& f) {
        broadcast_downs(self, self->state.bridge->on_flushed(f, caf::actor_cast<caf::actor_addr>(self->current_sender())));
      },
      [=](gateway_tick) { head_tick(self); },
      [=](const net::process_welcome& w) { self->state.welcome = w; },  // the bound port
  };
}

}  // namespace

caf::actor spawn_head_gateway(caf::actor_system& sys, caf::actor head, net::server_options options,
                              liveness_options liveness, std::uint16_t* bound_port,
                              net::process_welcome welcome) {
  // The transport thread delivers to the gateway, which must exist before the server starts.
  auto gateway = std::make_shared<caf::actor>();
  auto server = std::make_shared<net::wire_server>(
      make_wire_codec(), std::move(options), [gateway](const net::peer& from, caf::message msg) {
        caf::anon_send(*gateway, incoming_frame{from.routing_id, std::move(msg)});
      });
  const auto welcome_address = welcome.head_address;
  const auto epoch = welcome.epoch;
  *gateway = sys.spawn(head_gateway, std::move(head), server, liveness, std::move(welcome));
  try {
    server->start();
  } catch (...) {
    caf::anon_send_exit(*gateway, caf::exit_reason::user_shutdown);
    throw;
  }
  *bound_port = server->port();
  // Asked for any port (":0"): welcomes name the port bound.
  if (welcome_address.size() > 2 && welcome_address.compare(welcome_address.size() - 2, 2, ":0") == 0)
    caf::anon_send(*gateway, net::process_welcome{welcome_address.substr(0, welcome_address.size() - 1) +
                                                      std::to_string(*bound_port),
                                                  epoch});
  return *gateway;
}

}  // namespace cohort::actors

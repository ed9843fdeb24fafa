// The messages of the bridge between processes: a routed envelope that carries one encoded frame
// from an endpoint in one process to an endpoint in another, the death of an endpoint, and the
// hello and heartbeats of a process. An endpoint is "<process>/<name>": "head/head",
// "node:n1/node", "node:n1/a42" (an actor of node n1's process that talked over the wire).
#pragma once

#include <cstdint>
#include <string>

#include <caf/meta/type_name.hpp>

namespace cohort::net {

struct routed {
  static constexpr std::uint32_t wire_id = 100;
  std::string to;
  std::string from;
  std::string payload;  // one frame of the same codec (the message itself)
};

struct endpoint_down {
  static constexpr std::uint32_t wire_id = 101;
  std::string endpoint;
  std::string reason;  // empty: the actor finished normally
};

// A process introduces itself (again, after a reconnect) under its process name.
struct process_hello {
  static constexpr std::uint32_t wire_id = 102;
  std::string process;
  // New each time the process starts. A hello under a registered name with another incarnation
  // is a restarted process: the head declares the old one lost (its actors died with it) before
  // registering the new one, however soon it came back.
  std::string incarnation;
};

struct heartbeat {
  static constexpr std::uint32_t wire_id = 103;
  std::string process;
  std::uint64_t seq = 0;
};

// A client request the head could not serve: what went wrong, for the user.
struct request_failed {
  static constexpr std::uint32_t wire_id = 104;
  std::string message;
};

// A standby head's answer to every request and hello: it does not lead; `leader` is where the
// leading head serves ("" while no head holds a live lease, e.g. right after the leader died).
// Clients and nodes go there (or to their next head address) and send again.
struct not_leader {
  static constexpr std::uint32_t wire_id = 105;
  std::string leader;
  std::int64_t leader_epoch = 0;  // the lease epoch of `leader`; 0 when none
  std::string message;            // for the user: "not the leader; the leader is X"
};

// The leading head's answer to a process_hello: the node is registered with the leader of `epoch`.
struct process_welcome {
  static constexpr std::uint32_t wire_id = 106;
  std::string head_address;
  std::int64_t epoch = 0;
};

// The leading head's answer to a heartbeat or routed frame of a process it does not know (it
// declared the process lost when its heartbeats stopped, e.g. across a partition that healed):
// the process says process_hello again, and what it ran is judged afresh (a node's attempts
// that the head gave up on are stopped when they announce themselves).
struct unknown_process {
  static constexpr std::uint32_t wire_id = 107;
  std::string process;
  std::string message;  // why, for the process's log
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, routed& x) {
  return f(caf::meta::type_name("routed"), x.to, x.from, x.payload);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, endpoint_down& x) {
  return f(caf::meta::type_name("endpoint_down"), x.endpoint, x.reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, process_hello& x) {
  return f(caf::meta::type_name("process_hello"), x.process, x.incarnation);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, heartbeat& x) {
  return f(caf::meta::type_name("heartbeat"), x.process, x.seq);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_failed& x) {
  return f(caf::meta::type_name("request_failed"), x.message);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, not_leader& x) {
  return f(caf::meta::type_name("not_leader"), x.leader, x.leader_epoch, x.message);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, process_welcome& x) {
  return f(caf::meta::type_name("process_welcome"), x.head_address, x.epoch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, unknown_process& x) {
  return f(caf::meta::type_name("unknown_process"), x.process, x.message);
}

// The process part of an endpoint ("node:n1" of "node:n1/a42").
inline std::string process_of(const std::string& endpoint) {
  auto slash = endpoint.find('/');
  return slash == std::string::npos ? endpoint : endpoint.substr(0, slash);
}

}  // namespace cohort::net

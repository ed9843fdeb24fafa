// Who sent a frame to a wire_server: the ROUTER routing id (to reply) and the client's CURVE
// public key (Z85, as the ZAP handler admitted it). Inspectable, so an actor can receive
// `caf::make_message(from) + msg` and match `[](const peer&, const node_heartbeat&)`.
#pragma once

#include <string>

#include <caf/meta/type_name.hpp>

namespace cohort::net {

struct peer {
  std::string routing_id;
  std::string client_key;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, peer& x) {
  return f(caf::meta::type_name("peer"), x.routing_id, x.client_key);
}

} // namespace cohort::net

// Registers every wire message (and peer, wire_error) with a CAF actor system config, under the
// name its inspect gives, so one declaration serves CAF and the msgpack codec:
//   register_wire_types(cfg, actors::wire_messages{});
#pragma once

#include <caf/actor_system_config.hpp>

#include "net/codec.hpp"
#include "net/peer.hpp"

namespace cohort::net {

template <class... Ts>
void register_wire_types(caf::actor_system_config& cfg, wire_types<Ts...>) {
  cfg.add_message_type<wire_error>(wire_type_name<wire_error>());
  cfg.add_message_type<peer>("cohort::net::peer");
  (cfg.add_message_type<Ts>(wire_type_name<Ts>()), ...);
}

} // namespace cohort::net

// Registers every wire message with a CAF actor system config, under the name its inspect gives,
// so the same declaration serves CAF (to_string, remote actors) and the msgpack codec.
#pragma once

#include <caf/actor_system_config.hpp>

#include "net/codec.hpp"

namespace cohort::net {

template <class T>
const char* wire_type_name() {
  detail::type_name_probe probe;
  T sample{};
  inspect(probe, sample);
  return probe.name ? probe.name : typeid(T).name();
}

template <class... Ts>
void add_message_types(caf::actor_system_config& cfg, wire_types<Ts...>) {
  cfg.add_message_type<wire_error>(wire_type_name<wire_error>());
  (cfg.add_message_type<Ts>(wire_type_name<Ts>()), ...);
}

} // namespace cohort::net

// The wire declarations inside CAF: registration by inspect name, stringification, and a decoded
// message prefixed with its peer for an actor's handler.
#include <catch2/catch.hpp>

#include <caf/actor_system_config.hpp>
#include <caf/deep_to_string.hpp>

#include "net/caf_types.hpp"
#include "tests/net/example_messages.hpp"

using namespace cohort::net;
using namespace cohort::net::test;

TEST_CASE("wire types register with CAF under their inspect names", "[net][caf]") {
  caf::actor_system_config cfg;
  register_wire_types(cfg, example_types{});
  CHECK(cfg.type_names_by_rtti.at(typeid(ping)) == "ping");
  CHECK(cfg.type_names_by_rtti.at(typeid(everything)) == "everything");
  CHECK(cfg.type_names_by_rtti.at(typeid(wire_error)) == "wire_error");
  CHECK(cfg.type_names_by_rtti.at(typeid(peer)) == "cohort::net::peer");
}

TEST_CASE("a decoded message prefixed with its peer matches a (peer, message) handler",
          "[net][caf]") {
  wire_codec codec{example_types{}};
  auto frame = codec.encode(ping{9, "n1"});
  auto d = codec.decode(frame.data(), frame.size());
  REQUIRE(d.ok());
  caf::message for_actor = caf::make_message(peer{"id-1", "key"}) + d.message;
  REQUIRE(for_actor.match_elements<peer, ping>());
  CHECK(for_actor.get_as<peer>(0).routing_id == "id-1");
  CHECK(for_actor.get_as<ping>(1).seq == 9);
  CHECK_THAT(caf::to_string(d.message), Catch::Contains("ping") && Catch::Contains("n1"));
}

// Finding the leading head: address lists, the store's leader record, redirects followed a
// bounded number of times, and an error that names what every head answered.
#include <catch2/catch.hpp>

#include "net/bridge_messages.hpp"
#include "net/codec.hpp"
#include "net/head_addresses.hpp"
#include "net/net_error.hpp"

using namespace cohort::net;

TEST_CASE("a head address list is split at commas, trimmed and deduplicated", "[net]") {
  CHECK(parse_head_addresses("h1:7411") == std::vector<std::string>{"h1:7411"});
  CHECK(parse_head_addresses(" h1:7411 , 10.0.0.2:7412,h1:7411") ==
        std::vector<std::string>{"h1:7411", "10.0.0.2:7412"});
  CHECK(parse_head_addresses("tcp://h1:7411") == std::vector<std::string>{"tcp://h1:7411"});
}

TEST_CASE("a head address list with an empty entry or no port is refused, naming the entry",
          "[net]") {
  CHECK_THROWS_WITH(parse_head_addresses(""), Catch::Contains("has an empty entry"));
  CHECK_THROWS_WITH(parse_head_addresses("h1:7411,,h2:7411"), Catch::Contains("has an empty entry"));
  CHECK_THROWS_WITH(parse_head_addresses("h1:7411,h2"),
                    Catch::Contains("head address \"h2\"") && Catch::Contains("HOST:PORT"));
  CHECK_THROWS_WITH(parse_head_addresses("h1:99999"), Catch::Contains("\"h1:99999\""));
  CHECK_THROWS_WITH(parse_head_addresses(":7411"), Catch::Contains("\":7411\""));
}

TEST_CASE("a leader search tries the configured heads in order, then the store's leader",
          "[net]") {
  std::optional<std::string> store = "h3:1";
  leader_search s({"h1:1", "h2:1"}, [&] { return store; });
  CHECK(s.first() == "h1:1");  // the store's leader is not one of the list: the list first
  CHECK(s.unreachable("h1:1", "no answer within 2 s") == std::optional<std::string>("h2:1"));
  CHECK(s.unreachable("h2:1", "refused") == std::optional<std::string>("h3:1"));
  CHECK_FALSE(s.unreachable("h3:1", "no answer within 2 s"));
  const auto why = s.failure();
  CHECK_THAT(why, Catch::StartsWith("no head leads among h1:1, h2:1 and the store's leader record") &&
                      Catch::Contains("h1:1: no answer within 2 s") && Catch::Contains("h2:1: refused") &&
                      Catch::Contains("h3:1: no answer"));
}

TEST_CASE("a leader search starts at the store's live leader when it is one of the list", "[net]") {
  std::optional<std::string> store = "h2:1";
  leader_search s({"h1:1", "h2:1"}, [&] { return store; });
  CHECK(s.first() == "h2:1");
  CHECK(s.unreachable("h2:1", "no answer") == std::optional<std::string>("h1:1"));
  CHECK_FALSE(s.unreachable("h1:1", "no answer"));  // the store's leader was tried already
  store.reset();  // no live lease
  CHECK(s.first() == "h1:1");
  // Only a store: its leader, or nothing to try.
  leader_search only_store({}, [&] { return store; });
  CHECK(only_store.first().empty());
  CHECK_THAT(only_store.failure(), Catch::Contains("names no live leader"));
  CHECK_THROWS_AS(leader_search({}, {}), net_error);
}

TEST_CASE("a leader search follows redirects to the named leader at most max_redirects times",
          "[net]") {
  leader_search s({"h1:1"}, {}, 2);
  CHECK(s.first() == "h1:1");
  CHECK(s.redirected("h1:1", "h2:1", "standby; the leader is h2:1") == std::optional<std::string>("h2:1"));
  CHECK(s.redirected("h2:1", "h3:1", "standby; the leader is h3:1") == std::optional<std::string>("h3:1"));
  CHECK_FALSE(s.redirected("h3:1", "h1:1", "standby; the leader is h1:1"));
  CHECK_THAT(s.failure(), Catch::Contains("h1:1: not tried: 2 redirects followed already") &&
                              Catch::Contains("h2:1: standby; the leader is h3:1"));
  // Found: the budget is back.
  s.found("h1:1");
  CHECK(s.redirected("h1:1", "h2:1", "standby") == std::optional<std::string>("h2:1"));
}

TEST_CASE("a standby that names no leader sends the search to the next untried head", "[net]") {
  leader_search s({"h1:1", "h2:1"});
  CHECK(s.first() == "h1:1");
  CHECK(s.redirected("h1:1", "", "standby; no head holds a live lease") ==
        std::optional<std::string>("h2:1"));
  CHECK_FALSE(s.redirected("h2:1", "", "standby; no head holds a live lease"));
  CHECK_THAT(s.failure(), Catch::Contains("h1:1: standby; no head holds a live lease") &&
                              Catch::Contains("h2:1: standby; no head holds a live lease"));
}

TEST_CASE("a node's endless search rotates through the list, the store's other live leader first",
          "[net]") {
  std::optional<std::string> store;
  leader_search s({"h1:1", "h2:1", "h3:1"}, [&] { return store; });
  CHECK(s.rotate("h1:1") == "h2:1");
  CHECK(s.rotate("h3:1") == "h1:1");
  CHECK(s.rotate("elsewhere:1") == "h1:1");
  store = "h9:1";
  CHECK(s.rotate("h1:1") == "h9:1");
  CHECK(s.rotate("h9:1") == "h1:1");  // the store names the silent head itself: the list moves on
}

TEST_CASE("not_leader and process_welcome cross the wire intact", "[net]") {
  wire_codec codec(wire_types<not_leader, process_welcome>{});
  const auto frame = codec.encode(not_leader{"10.0.0.2:7411", 7, "the leader is 10.0.0.2:7411"});
  auto d = codec.decode(frame.data(), frame.size());
  REQUIRE(d.ok());
  REQUIRE(d.message.match_element<not_leader>(0));
  const auto& n = d.message.get_as<not_leader>(0);
  CHECK(n.leader == "10.0.0.2:7411");
  CHECK(n.leader_epoch == 7);
  CHECK(n.message == "the leader is 10.0.0.2:7411");
  const auto w = codec.encode(process_welcome{"h:1", 3});
  auto dw = codec.decode(w.data(), w.size());
  REQUIRE(dw.ok());
  CHECK(dw.message.get_as<process_welcome>(0).epoch == 3);
  // A not_leader whose epoch is a string is refused, not thrown.
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> out{buf};
  out.pack_array(3);
  out.pack_uint32(protocol_version);
  out.pack_uint32(not_leader::wire_id);
  out.pack_array(3);
  out.pack(std::string("h:1"));
  out.pack(std::string("seven"));
  out.pack(std::string("m"));
  auto bad = codec.decode(buf.data(), buf.size());
  CHECK(bad.error == frame_error::bad_body);
}

// The client table (actors/client_protocol.hpp): what it says of each request, every request and
// reply crossing the wire codec as itself, and a head actor that handles every request it lists;
// and the wire codec carrying no failure drill (actors/drill_messages.hpp).
#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <msgpack.hpp>

#include "actors/client_protocol.hpp"
#include "actors/head_actor.hpp"
#include "actors/wire_protocol.hpp"

using namespace cohort;
using namespace cohort::actors;

static_assert(std::is_same_v<reply_to<plan_request>, plan_reply>);
static_assert(std::is_same_v<reply_to<follow_job>, job_record>);
static_assert(std::is_same_v<reply_to<drain_node>, drain_reply>);
static_assert(is_client_request<logs_query>);
static_assert(!is_client_request<node_hello>);

TEST_CASE("queries may be sent again to another head, commands never", "[actors]") {
  CHECK(retry_safe<job_query>);
  CHECK(retry_safe<job_list_query>);
  CHECK(retry_safe<logs_query>);
  CHECK(retry_safe<follow_job>);
  CHECK(retry_safe<plan_request>);
  CHECK_FALSE(retry_safe<submit_job>);
  CHECK_FALSE(retry_safe<stop_job>);
  CHECK_FALSE(retry_safe<checkpoint_job>);
  CHECK_FALSE(retry_safe<release_job>);
  CHECK_FALSE(retry_safe<drain_node>);
}

TEST_CASE("every request and reply of the client table crosses the wire codec as itself", "[actors]") {
  const auto codec = make_wire_codec();
  std::size_t calls = 0;
  for_each_client_call([&](auto call) {
    using request = typename decltype(call)::request;
    using reply = typename decltype(call)::reply;
    const auto sent = codec->encode(request{});
    const auto got = codec->decode(sent.data(), sent.size());
    INFO(got.detail);
    REQUIRE(got.ok());
    CHECK(got.message.template match_element<request>(0));
    const auto answer = codec->encode(reply{});
    const auto back = codec->decode(answer.data(), answer.size());
    REQUIRE(back.ok());
    CHECK(back.message.template match_element<reply>(0));
    ++calls;
  });
  CHECK(calls == client_calls::size);
}

TEST_CASE("the wire codec neither encodes a failure drill nor decodes a frame with a drill's old id",
          "[actors]") {
  const auto codec = make_wire_codec();
  CHECK_THROWS_AS(codec->encode(caf::make_message(kill_worker_drill{"job-1", 1})), net::encode_error);
  CHECK_THROWS_AS(codec->encode(caf::make_message(kill_trainer_drill{"job-1"})), net::encode_error);
  for (const std::uint32_t old_id : {38u, 41u}) {
    INFO("type id " << old_id);
    CHECK(codec->type_name(old_id) == nullptr);
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> out{buf};
    out.pack_array(3);
    out.pack(net::protocol_version);
    out.pack(old_id);
    out.pack_array(2);
    out.pack(std::string{"job-1"});
    out.pack(std::int32_t{1});
    const auto got = codec->decode(buf.data(), buf.size());
    CHECK(got.error == net::frame_error::unknown_type);
  }
}

TEST_CASE("the head actor handles every request of the client table, with its reply or a refusal "
          "that says why",
          "[actors]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto head = sys.spawn(head_actor, head_options{});
  caf::scoped_actor self{sys};
  for_each_client_call([&](auto call) {
    using request = typename decltype(call)::request;
    using reply = typename decltype(call)::reply;
    std::string outcome;
    self->request(head, std::chrono::seconds(30), request{})
        .receive([&](reply&) { outcome = "reply"; },
                 [&](caf::error& err) {
                   outcome = err == caf::sec::unexpected_message ? "unhandled" : "refused: " + describe(sys, err);
                 });
    INFO(net::wire_type_name<request>() << ": " << outcome);
    CHECK((outcome == "reply" || outcome.rfind("refused: ", 0) == 0));
    CHECK(outcome != "refused: ");
  });
  caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
}

// The ROUTER/DEALER transport: bad frames from an admitted peer are counted, answered and
// dropped; raw garbage on the port and oversized frames do not stop the server; clients
// reconnect to a restarted server.
#include <filesystem>
#include <catch2/catch.hpp>

#include <cerrno>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/net_error.hpp"
#include "tests/net/example_messages.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::net;
using namespace cohort::net::test;
using cohort::test::temp_dir;

namespace {

// A DEALER holding valid CURVE credentials that sends arbitrary frames and reads raw replies.
struct raw_client {
  raw_client(const cluster_credentials& creds, const std::string& address)
    : socket{ctx, zmq::socket_type::dealer} {
    socket.set(zmq::sockopt::linger, 0);
    configure_curve_client(socket, creds.server_public_key, creds.client);
    socket.connect(tcp_endpoint(address));
  }
  void send(const std::string& frame) { socket.send(zmq::buffer(frame)); }
  std::optional<std::string> receive(std::chrono::milliseconds timeout) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0)
      return std::nullopt;
    zmq::message_t msg;
    if (!socket.recv(msg))
      return std::nullopt;
    return msg.to_string();
  }
  zmq::context_t ctx;
  zmq::socket_t socket;
};

wire_error expect_wire_error(const wire_codec& codec, raw_client& raw) {
  auto frame = raw.receive(patience);
  REQUIRE(frame);
  auto d = codec.decode(frame->data(), frame->size());
  REQUIRE(d.ok());
  REQUIRE(d.message.match_element<wire_error>(0));
  return d.message.get_as<wire_error>(0);
}

std::string envelope_with(std::uint32_t version, std::uint32_t type, int body_ints) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> out{buf};
  out.pack_array(3);
  out.pack(version);
  out.pack(type);
  out.pack_array(body_ints);
  for (int i = 0; i < body_ints; ++i)
    out.pack(i);
  return std::string(buf.data(), buf.size());
}

} // namespace

TEST_CASE("every class of bad frame from an admitted peer is counted, answered and dropped",
          "[net][transport]") {
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  frame_limits limits;
  limits.max_frame_bytes = 64 << 10;
  echo_server head{secrets, limits};
  raw_client raw{secrets.credentials, head.address()};
  const wire_codec& codec = *head.codec;
  const std::string good = codec.encode(ping{5, "raw"});

  struct bad_frame {
    std::string bytes;
    frame_error reason;
  };
  const std::vector<bad_frame> frames{
    {"\xc1garbage", frame_error::malformed},
    {good.substr(0, good.size() - 2), frame_error::truncated},
    {std::string(70 << 10, '\x90'), frame_error::oversized},
    {std::string{"\xdd\x7f\xff\xff\xff", 5}, frame_error::limit_exceeded},
    {"\xa5hello", frame_error::bad_envelope},
    {envelope_with(protocol_version + 1, ping::wire_id, 2), frame_error::wrong_version},
    {envelope_with(protocol_version, 4242, 2), frame_error::unknown_type},
    {envelope_with(protocol_version, ping::wire_id, 5), frame_error::bad_body},
  };
  for (const auto& bad : frames) {
    INFO("expecting " << to_string(bad.reason));
    raw.send(bad.bytes);
    wire_error err = expect_wire_error(codec, raw);
    CHECK(err.reason == bad.reason);
    CHECK_FALSE(err.detail.empty());
    CHECK(head.server->stats().refused_for(bad.reason) == 1);
  }
  // Two frames in one message.
  raw.socket.send(zmq::buffer(good), zmq::send_flags::sndmore);
  raw.socket.send(zmq::buffer(good));
  CHECK(expect_wire_error(codec, raw).reason == frame_error::multipart);
  CHECK(head.server->stats().refused_for(frame_error::multipart) == 1);

  auto stats = head.server->stats();
  CHECK(stats.refused_total() == frames.size() + 1);
  CHECK(stats.accepted == 0);
  CHECK(head.box.size() == 0);

  // The same connection still works for good frames.
  raw.send(good);
  auto reply = raw.receive(patience);
  REQUIRE(reply);
  auto d = codec.decode(reply->data(), reply->size());
  REQUIRE(d.message.match_element<ping>(0));
  CHECK(d.message.get_as<ping>(0).seq == 6);
}

TEST_CASE("a frame far above the limit drops only that connection", "[net][transport]") {
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  frame_limits limits;
  limits.max_frame_bytes = 64 << 10;
  echo_server head{secrets, limits};
  {
    raw_client raw{secrets.credentials, head.address()};
    raw.send(std::string(1 << 20, 'x')); // 16x the limit: libzmq closes the connection
    CHECK_FALSE(raw.receive(200ms));
  }
  CHECK(head.server->serving());
  CHECK(serves_ping(secrets.credentials, head.address()));
}

TEST_CASE("raw garbage, truncated and oversized bytes on the port do not stop the server",
          "[net][transport]") {
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  echo_server head{secrets};
  const std::vector<std::string> payloads{
    "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    std::string("\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f", 10), // ZMTP signature, cut short
    std::string(256 << 10, '\xab'),
  };
  for (const auto& bytes : payloads) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(head.server->port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    CHECK(sent > 0);
    ::shutdown(fd, SHUT_WR);
    // The server reads the greeting, refuses it and closes: drain until EOF or a reset.
    char buf[4096];
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t n;
    do {
      n = ::recv(fd, buf, sizeof buf, 0);
    } while (n > 0);
    int err = n < 0 ? errno : 0;
    CHECK((n == 0 || err == ECONNRESET));
    ::close(fd);
  }
  CHECK(head.server->serving());
  CHECK(serves_ping(secrets.credentials, head.address()));
  CHECK(head.server->stats().accepted == 1);
}

TEST_CASE("a client reconnects to a server restarted on the same port", "[net][transport]") {
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  auto head = std::make_unique<echo_server>(secrets);
  const std::uint16_t port = head->server->port();
  inbox<caf::message> replies;
  std::vector<link_state> seen;
  auto codec = std::make_shared<const wire_codec>(example_types{});
  wire_client client{codec, client_options::from(secrets.credentials, head->address()),
                     replies.sink()};
  client.start();
  REQUIRE(client.wait_for_link(patience) == link_state::connected);
  head.reset();
  REQUIRE(eventually([&] { return client.status().state == link_state::connecting; }));
  head = std::make_unique<echo_server>(secrets, frame_limits{}, port);
  REQUIRE(eventually([&] { return client.status().handshakes >= 2; }));
  client.send(ping{10, "back"});
  auto reply = replies.pop(patience);
  REQUIRE(reply);
  CHECK(reply->get_as<ping>(0).seq == 11);
  CHECK(client.status().disconnects >= 1);
}

TEST_CASE("sends while no connection is up are dropped and counted", "[net][transport]") {
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  inbox<caf::message> replies;
  auto client = make_client(secrets.credentials, "127.0.0.1:1", replies); // nothing listens
  client->send(ping{1, "lost"});
  CHECK(eventually([&] { return client->stats().send_dropped == 1; }));
  CHECK(client->status().state == link_state::connecting);
}

TEST_CASE("a server cannot bind a port that is taken", "[net][transport]") {
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  echo_server first{secrets};
  CHECK_THROWS_AS(echo_server(secrets, frame_limits{}, first.server->port()), net_error);
  CHECK(serves_ping(secrets.credentials, first.address()));
}

TEST_CASE("head addresses are parsed as HOST:PORT", "[net][transport]") {
  CHECK(tcp_endpoint("127.0.0.1:6380") == "tcp://127.0.0.1:6380");
  CHECK(tcp_endpoint("tcp://head.local:5") == "tcp://head.local:5");
  CHECK_THROWS_WITH(tcp_endpoint("head"), Catch::Contains("expected HOST:PORT"));
  CHECK_THROWS_AS(tcp_endpoint("head:0"), net_error);
  CHECK_THROWS_AS(tcp_endpoint("head:70000"), net_error);
  CHECK_THROWS_AS(tcp_endpoint(":80"), net_error);
  CHECK_THROWS_AS(tcp_endpoint("head:80x"), net_error);
}

TEST_CASE("messages sent from many threads all arrive", "[net][transport]") {
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  echo_server head{secrets};
  inbox<caf::message> replies;
  auto client = make_client(secrets.credentials, head.address(), replies);
  REQUIRE(client->wait_for_link(patience) == link_state::connected);
  std::vector<std::thread> senders;
  for (int t = 0; t < 4; ++t)
    senders.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i)
        client->send(ping{static_cast<std::uint64_t>(t * 1000 + i), "t"});
    });
  for (auto& s : senders)
    s.join();
  int got = 0;
  while (got < 200 && replies.pop(patience))
    ++got;
  CHECK(got == 200);
  CHECK(head.server->stats().accepted == 200);
}

TEST_CASE("the cluster's keys are the owner's alone: 0600 files in a 0700 directory", "[net]") {
  namespace fs = std::filesystem;
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  const auto mode = [](const fs::path& p) { return fs::status(p).permissions() & fs::perms::all; };
  const fs::path dir = fs::path(store.path()) / "cluster";
  CHECK(mode(dir) == fs::perms::owner_all);
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    INFO(e.path());
    CHECK(mode(e.path()) == (fs::perms::owner_read | fs::perms::owner_write));
    ++files;
  }
  CHECK(files >= 2);  // the server key and the credentials
}

// Credentials files and CURVE + ZAP: only clients holding this cluster's credentials are served.
#include <catch2/catch.hpp>

#include <cstdlib>

#include <sys/stat.h>

#include "net/net_error.hpp"
#include "net/zap_handler.hpp"
#include "tests/net/example_messages.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::net;
using namespace cohort::net::test;
using cohort::test::temp_dir;

namespace {

unsigned mode_of(const std::filesystem::path& file) {
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

} // namespace

TEST_CASE("the first start creates the cluster's credentials with mode 0600 and later starts "
          "reuse them",
          "[net][security]") {
  temp_dir store;
  auto first = ensure_cluster_credentials(store.path());
  CHECK(first.created);
  CHECK(first.credentials_file == store.path() / "cluster" / "credentials.json");
  CHECK(mode_of(first.credentials_file) == 0600);
  CHECK(mode_of(store.path() / "cluster" / "server_key.json") == 0600);
  CHECK(first.credentials.server_public_key == first.server.public_key);

  auto again = ensure_cluster_credentials(store.path());
  CHECK_FALSE(again.created);
  CHECK(again.server.secret_key == first.server.secret_key);
  CHECK(again.credentials.client.secret_key == first.credentials.client.secret_key);

  auto loaded = load_credentials(first.credentials_file);
  CHECK(loaded.client.public_key == first.credentials.client.public_key);
  CHECK(loaded.server_address.empty());
}

TEST_CASE("saved credentials round trip with the server address", "[net][security]") {
  temp_dir dir;
  cluster_credentials c{generate_curve_keypair().public_key, generate_curve_keypair(),
                        "10.0.0.5:6380"};
  auto file = dir.path() / "creds.json";
  save_credentials(file, c);
  CHECK(mode_of(file) == 0600);
  auto back = load_credentials(file);
  CHECK(back.server_public_key == c.server_public_key);
  CHECK(back.client.secret_key == c.client.secret_key);
  CHECK(back.server_address == "10.0.0.5:6380");
}

TEST_CASE("bad credentials files are refused with a message naming the file and field",
          "[net][security]") {
  temp_dir dir;
  auto file = dir.path() / "creds.json";
  CHECK_THROWS_WITH(load_credentials(file), Catch::Contains("does not exist"));
  dir.write("creds.json", "{not json");
  CHECK_THROWS_WITH(load_credentials(file), Catch::Contains("is not valid JSON"));
  dir.write("creds.json", R"({"format": "cohort-credentials/1", "server_public_key": "x"})");
  CHECK_THROWS_WITH(load_credentials(file), Catch::Contains("missing field 'client_public_key'"));
  auto a = generate_curve_keypair();
  auto b = generate_curve_keypair();
  dir.write("creds.json", R"({"format": "cohort-credentials/1", "server_public_key": "short",)"
                          R"( "client_public_key": ")" + a.public_key + R"(", "client_secret_key": ")"
                            + a.secret_key + "\"}");
  CHECK_THROWS_WITH(load_credentials(file),
                    Catch::Contains("'server_public_key' must be a 40-character Z85 CURVE key"));
  dir.write("creds.json", R"({"format": "cohort-credentials/1", "server_public_key": ")" + b.public_key
                            + R"(", "client_public_key": ")" + a.public_key
                            + R"(", "client_secret_key": ")" + b.secret_key + "\"}");
  CHECK_THROWS_WITH(load_credentials(file),
                    Catch::Contains("the secret key does not belong to the public key"));
  dir.write("creds.json", R"({"format": "something-else"})");
  CHECK_THROWS_WITH(load_credentials(file), Catch::Contains("field 'format'"));
}

TEST_CASE("credentials come from the flag, else from COHORT_CREDENTIALS", "[net][security]") {
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  {
    const cohort::test::scoped_env unset("COHORT_CREDENTIALS", nullptr);
    CHECK_THROWS_WITH(load_credentials_from(""), Catch::Contains("pass --credentials FILE"));
    CHECK(load_credentials_from(secrets.credentials_file.string()).client.public_key ==
          secrets.credentials.client.public_key);
  }
  const cohort::test::scoped_env set("COHORT_CREDENTIALS", secrets.credentials_file.string());
  CHECK(load_credentials_from("").server_public_key == secrets.server.public_key);
  CHECK_THROWS_WITH(load_credentials_from((store.path() / "nope.json").string()),
                    Catch::Contains("does not exist"));
}

TEST_CASE("a store whose server key went missing is refused rather than silently re-keyed",
          "[net][security]") {
  temp_dir store;
  ensure_cluster_credentials(store.path());
  std::filesystem::remove(store.path() / "cluster" / "server_key.json");
  CHECK_THROWS_AS(ensure_cluster_credentials(store.path()), credentials_error);
}

TEST_CASE("a client holding the cluster's credentials is served and identified by its key",
          "[net][security]") {
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  echo_server head{secrets};
  inbox<caf::message> replies;
  auto client = make_client(secrets.credentials, head.address(), replies);
  REQUIRE(client->wait_for_link(patience) == link_state::connected);
  client->send(ping{1, "node-a"});
  auto got = head.box.pop(patience);
  REQUIRE(got);
  CHECK(got->first.client_key == secrets.credentials.client.public_key);
  REQUIRE(got->second.match_element<ping>(0));
  CHECK(got->second.get_as<ping>(0).from == "node-a");
  auto reply = replies.pop(patience);
  REQUIRE(reply);
  REQUIRE(reply->match_element<ping>(0));
  CHECK(reply->get_as<ping>(0).seq == 2);
  CHECK(head.server->zap_accepted() >= 1);
}

TEST_CASE("a client whose key is not listed is refused by the ZAP handler", "[net][security]") {
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  echo_server head{secrets};
  cluster_credentials stranger = secrets.credentials;
  stranger.client = generate_curve_keypair(); // knows the server key, not admitted
  inbox<caf::message> replies;
  auto client = make_client(stranger, head.address(), replies);
  CHECK(client->wait_for_link(patience) == link_state::refused);
  client->send(ping{1, "stranger"});
  CHECK(head.server->zap_denied() >= 1);
  CHECK_FALSE(replies.pop(200ms));
  CHECK(head.server->stats().accepted == 0);
  CHECK(head.box.size() == 0);
}

TEST_CASE("a client with another cluster's credentials never completes a handshake",
          "[net][security]") {
  temp_dir store;
  temp_dir other_store;
  auto secrets = ensure_cluster_credentials(store.path());
  auto other = ensure_cluster_credentials(other_store.path());
  echo_server head{secrets};
  inbox<caf::message> replies;
  auto client = make_client(other.credentials, head.address(), replies);
  auto state = client->wait_for_link(patience);
  CHECK((state == link_state::handshake_failed || state == link_state::refused));
  client->send(ping{1, "other"});
  CHECK_FALSE(replies.pop(200ms));
  CHECK(head.server->stats().accepted == 0);
  CHECK(eventually([&] { return head.server->stats().handshake_failures >= 1; }));
}

TEST_CASE("a plaintext client without credentials gets nothing", "[net][security]") {
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  echo_server head{secrets};
  zmq::context_t ctx;
  zmq::socket_t plain{ctx, zmq::socket_type::dealer};
  plain.set(zmq::sockopt::linger, 0);
  plain.connect("tcp://" + head.address());
  plain.send(zmq::buffer(head.codec->encode(ping{1, "plain"})), zmq::send_flags::dontwait);
  CHECK(eventually([&] { return head.server->stats().handshake_failures >= 1; }));
  zmq::pollitem_t item{plain.handle(), 0, ZMQ_POLLIN, 0};
  CHECK(zmq::poll(&item, 1, std::chrono::milliseconds{200}) == 0);
  CHECK(head.server->stats().accepted == 0);
  CHECK(serves_ping(secrets.credentials, head.address()));
}

TEST_CASE("a CURVE server socket without a ZAP handler admits nobody", "[net][security]") {
  // configure_curve_server enforces the ZAP domain: with no handler in the context, libzmq must
  // refuse even a client whose keys would be valid.
  temp_dir store;
  auto secrets = ensure_cluster_credentials(store.path());
  zmq::context_t ctx;
  zmq::socket_t router{ctx, zmq::socket_type::router};
  router.set(zmq::sockopt::linger, 0);
  configure_curve_server(router, secrets.server);
  router.bind("tcp://127.0.0.1:*");
  std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  inbox<caf::message> replies;
  auto client = make_client(secrets.credentials, endpoint, replies);
  CHECK(client->wait_for_link(5s) != link_state::connected);
  client->send(ping{1, "x"});
  zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
  CHECK(zmq::poll(&item, 1, std::chrono::milliseconds{200}) == 0);
}

TEST_CASE("one ZeroMQ context has at most one ZAP handler", "[net][security]") {
  zmq::context_t ctx;
  auto key = generate_curve_keypair().public_key;
  zap_handler first{ctx, {key}};
  first.start();
  CHECK(first.running());
  zap_handler second{ctx, {key}};
  CHECK_THROWS_AS(second.start(), net_error);
  CHECK_THROWS_AS(zap_handler(ctx, {"not-a-key"}), credentials_error);
}

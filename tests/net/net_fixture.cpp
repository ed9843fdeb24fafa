// Helpers for the socket tests (see net_fixture.hpp).
#include "tests/net/net_fixture.hpp"

#include <thread>

#include "tests/net/example_messages.hpp"

namespace cohort::net::test {

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline)
      return condition();
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

echo_server::echo_server(const cluster_secrets& secrets, frame_limits limits, std::uint16_t port)
  : codec(std::make_shared<const wire_codec>(example_types{}, limits)) {
  auto options = server_options::from(secrets);
  options.port = port;
  server = std::make_unique<wire_server>(codec, options, [this](const peer& from, caf::message m) {
    if (m.match_element<ping>(0))
      server->send(from.routing_id, ping{m.get_as<ping>(0).seq + 1, "head"});
    box.push({from, std::move(m)});
  });
  server->start();
}

std::unique_ptr<wire_client> make_client(const cluster_credentials& creds,
                                         const std::string& address, inbox<caf::message>& box) {
  auto codec = std::make_shared<const wire_codec>(example_types{});
  auto client =
    std::make_unique<wire_client>(codec, client_options::from(creds, address), box.sink());
  client->start();
  return client;
}

bool serves_ping(const cluster_credentials& creds, const std::string& address) {
  inbox<caf::message> box;
  auto client = make_client(creds, address, box);
  if (client->wait_for_link(patience) != link_state::connected)
    return false;
  client->send(ping{41, "probe"});
  auto reply = box.pop(patience);
  return reply && reply->match_element<ping>(0) && reply->get_as<ping>(0).seq == 42;
}

} // namespace cohort::net::test

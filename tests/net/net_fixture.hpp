// Helpers for the socket tests: a running echo server, raw sockets that send arbitrary frames, and
// waiting for a condition with a deadline.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <caf/message.hpp>
#include <zmq.hpp>

#include "net/codec.hpp"
#include "net/credentials.hpp"
#include "net/inbox.hpp"
#include "net/wire_client.hpp"
#include "net/wire_server.hpp"

namespace cohort::net::test {

using namespace std::chrono_literals;

// How long a test waits for something that must happen (a link, a reply, a counter): a ceiling
// for a loaded machine, not a pace; the waits return as soon as it happens. Waits that check
// that something does not happen use short timeouts of their own.
constexpr std::chrono::milliseconds patience = 30s;

// Polls `condition` until it holds or `timeout` passes; returns its last value.
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout = patience);

using received = std::pair<peer, caf::message>;

// A server on an ephemeral 127.0.0.1 port that answers ping{n} with ping{n + 1, "head"}.
struct echo_server {
  explicit echo_server(const cluster_secrets& secrets, frame_limits limits = {},
                       std::uint16_t port = 0);
  std::shared_ptr<const wire_codec> codec;
  inbox<received> box;
  std::unique_ptr<wire_server> server;
  std::string address() const { return "127.0.0.1:" + std::to_string(server->port()); }
};

// A started client of `address` with these credentials, feeding `box`.
std::unique_ptr<wire_client> make_client(const cluster_credentials& creds,
                                         const std::string& address, inbox<caf::message>& box);

// True when the server at `address` answers a real client's ping within the timeout.
bool serves_ping(const cluster_credentials& creds, const std::string& address);

} // namespace cohort::net::test

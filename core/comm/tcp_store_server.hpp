// The TCP rendezvous store server the job's trainer owns: a map served on one owned thread
// (poll loop over non-blocking sockets). Only clients holding the attempt's secret are served:
// each proves it at connect (challenge-response) and seals every frame (see tcp_store_wire.hpp).
// A client that fails the handshake, does not finish it within handshake_timeout, or (once in)
// sends a frame that fails its MAC, is malformed or longer than wire::max_frame_bytes is
// disconnected and counted; the others are served on. Before a client is authenticated the
// server reads no more than its handshake frame (68 bytes); after, no more than the frame whose
// length it has checked. Keys and values are bounded (store.hpp: max_store_key_bytes,
// max_store_value_bytes, max_store_keys, max_store_bytes); a set() past a bound is answered
// with an error naming it. Parks a get() until its key is set or its timeout passes.
// Destroying the server stops the thread and closes every connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace cohort::core::comm {

// One refused or dropped client, as the server's thread reports it.
struct store_refusal {
  std::string peer;     // the client's address, "HOST:PORT"
  std::string reason;   // what it did wrong
  bool authenticated;   // false: refused at connect; true: dropped for a bad frame
  std::uint64_t refused = 0;  // totals so far, this one included
  std::uint64_t dropped = 0;
};

class tcp_store_server {
 public:
  using refusal_callback = std::function<void(const store_refusal&)>;
  // How long a connected client has to complete the handshake.
  static constexpr std::chrono::seconds handshake_timeout{10};
  // Connections not yet authenticated at once; more are closed (and counted) on accept, before
  // the greeting, which a tcp_store client takes as "retry" until its connect timeout.
  static constexpr std::size_t max_pending_clients = 256;

  // Binds host:port (port 0 picks a free port) and starts serving clients that hold `secret`
  // (store_secret_bytes raw bytes, see store_auth.hpp). on_refusal, if given, is called on the
  // server's thread for every refused or dropped client (it must not block; exceptions are
  // swallowed). Throws comm_error (invalid_argument) for a secret of the wrong size and
  // (store_failure) when the address cannot be bound.
  tcp_store_server(const std::string& host, std::uint16_t port, std::string secret,
                   refusal_callback on_refusal = {});
  ~tcp_store_server();
  tcp_store_server(const tcp_store_server&) = delete;
  tcp_store_server& operator=(const tcp_store_server&) = delete;

  std::uint16_t port() const;
  const std::string& host() const;
  // Diagnostics, readable from any thread:
  std::size_t client_count() const;     // connected clients, authenticated or not
  std::uint64_t refused_count() const;  // clients refused at connect (no or wrong proof, slow)
  std::uint64_t dropped_count() const;  // authenticated clients dropped for a bad frame
  std::size_t held_bytes() const;       // key + value bytes the store holds
  std::size_t buffered_bytes() const;   // bytes received or to send, not yet handled, all clients

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace cohort::core::comm

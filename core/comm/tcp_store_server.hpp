// The TCP rendezvous store server the job's trainer owns: a map served on one owned thread
// (poll loop over non-blocking sockets). Parks a get() until its key is set or its timeout
// passes; drops a client that sends a malformed or oversized frame, or vanishes, and keeps
// serving the others. Destroying it stops the thread and closes every connection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace cohort::core::comm {

class tcp_store_server {
 public:
  // Binds host:port (port 0 picks a free port) and starts serving. Throws comm_error
  // (store_failure) when the address cannot be bound.
  explicit tcp_store_server(const std::string& host = "127.0.0.1", std::uint16_t port = 0);
  ~tcp_store_server();
  tcp_store_server(const tcp_store_server&) = delete;
  tcp_store_server& operator=(const tcp_store_server&) = delete;

  std::uint16_t port() const;
  const std::string& host() const;
  // Number of connected clients (for tests and diagnostics).
  std::size_t client_count() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace cohort::core::comm

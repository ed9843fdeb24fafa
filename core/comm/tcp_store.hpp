// The client of tcp_store_server: one TCP connection per instance, one request at a time (a
// mutex serialises callers). It authenticates with the store's secret at every connect and seals
// every frame (see tcp_store_wire.hpp); a server that cannot prove it holds the secret is not
// believed. A broken connection is re-established (and authenticated again) on the next call.
#pragma once

#include "core/comm/store.hpp"

#include <memory>
#include <mutex>

namespace cohort::core::comm {

namespace wire {
class session;
}

struct host_port {
  std::string host;
  std::uint16_t port = 0;
};
// Parses "HOST:PORT" (IPv6 as "[::1]:PORT"); throws comm_error (invalid_argument) naming the
// text and the expected form.
host_port parse_host_port(const std::string& text);

class tcp_store final : public store {
 public:
  // Connects and authenticates with `secret` (store_secret_bytes raw bytes: the attempt's, see
  // store_auth.hpp), retrying refused connections until connect_timeout (the server may come up
  // a moment later). Throws comm_error (invalid_argument) for a secret of the wrong size and
  // (store_failure) when it cannot connect or the server refuses the secret.
  tcp_store(std::string host, std::uint16_t port, std::string secret,
            std::chrono::milliseconds connect_timeout = std::chrono::seconds(30));
  ~tcp_store() override;
  tcp_store(const tcp_store&) = delete;
  tcp_store& operator=(const tcp_store&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;

 private:
  // Sends one request and returns the reply payload after its status byte; throws on
  // timeout / error replies and on I/O failures (closing the connection).
  std::string request(const std::string& payload, std::chrono::milliseconds reply_timeout,
                      const std::string& what);
  void connect_locked(std::chrono::milliseconds timeout);
  // Runs the handshake on the new connection fd_. Throws comm_error (store_failure) when the
  // store refuses the proof or cannot prove itself; false (fd_ closed, retry_reason set) when
  // the store closed the connection before its greeting, as it does at its client limits.
  bool authenticate_locked(std::chrono::steady_clock::time_point deadline, std::string& retry_reason);
  void close_locked();

  std::string host_;
  std::uint16_t port_;
  std::string secret_;
  std::chrono::milliseconds connect_timeout_;
  std::mutex mutex_;
  int fd_ = -1;
  std::unique_ptr<wire::session> session_;  // set while fd_ is an authenticated connection
};

}  // namespace cohort::core::comm

// The ZAP handler of one ZeroMQ context: admits a CURVE client only if its public key is listed,
// and only in the cohort ZAP domain. Owns one thread that serves inproc://zeromq.zap.01.
// Servers start it before they bind and stop serving if it ends (fail closed).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "net/loop_support.hpp"

namespace cohort::net {

class zap_handler {
public:
  // allowed_client_keys: Z85 public keys; throws credentials_error on a malformed key.
  zap_handler(zmq::context_t& ctx, const std::vector<std::string>& allowed_client_keys);
  ~zap_handler();
  zap_handler(const zap_handler&) = delete;
  zap_handler& operator=(const zap_handler&) = delete;

  // Binds the ZAP endpoint of the context and starts the thread. Throws net_error if the
  // context already has a ZAP handler. `on_exit` runs on the ZAP thread if it ends on an error.
  void start(std::function<void()> on_exit = {});
  void stop();
  bool running() const { return running_.load(); }

  std::uint64_t accepted() const { return accepted_.load(); }
  std::uint64_t denied() const { return denied_.load(); }

private:
  void run(zmq::socket_t socket);
  bool admits(const zmq::message_t& domain, const zmq::message_t& mechanism,
              const zmq::message_t& key) const;

  zmq::context_t& ctx_;
  std::vector<std::array<std::uint8_t, 32>> allowed_;
  detail::wakeup wake_;
  std::function<void()> on_exit_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
  std::atomic<std::uint64_t> accepted_{0};
  std::atomic<std::uint64_t> denied_{0};
  std::thread thread_;
};

} // namespace cohort::net

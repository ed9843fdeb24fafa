// The head's side of the wire: a CURVE ROUTER socket owned by one loop thread. Frames are decoded
// on that thread and handed to the handler with the peer they came from; bad frames are counted,
// dropped and answered with a wire_error. send() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/message.hpp>
#include <zmq.hpp>

#include "net/codec.hpp"
#include "net/curve.hpp"
#include "net/frame_error.hpp"
#include "net/loop_support.hpp"
#include "net/peer.hpp"
#include "net/zap_handler.hpp"

namespace cohort::net {

struct cluster_secrets;

struct server_options {
  std::string bind_address = "127.0.0.1"; // "*" or "0.0.0.0" for every interface
  std::uint16_t port = 0;                 // 0: an ephemeral port, see wire_server::port()
  curve_keypair server_keys;
  std::vector<std::string> allowed_client_keys; // Z85 public keys admitted by the ZAP handler
  int send_hwm = 10000;   // per peer; beyond it frames are dropped and counted
  int receive_hwm = 10000;
  std::chrono::milliseconds heartbeat_interval{1000}; // ZMTP pings; 0 disables
  std::chrono::milliseconds heartbeat_timeout{5000};

  // Keys and admitted client from the head's secrets (ensure_cluster_credentials).
  static server_options from(const cluster_secrets& secrets);
};

class wire_server {
public:
  // Runs on the loop thread; must not block for long.
  using handler = std::function<void(const peer& from, caf::message msg)>;

  wire_server(std::shared_ptr<const wire_codec> codec, server_options options, handler on_message);
  ~wire_server();
  wire_server(const wire_server&) = delete;
  wire_server& operator=(const wire_server&) = delete;

  // Starts the ZAP handler, binds, and starts the loop. Throws net_error (port taken, bad
  // address) or credentials_error (bad keys).
  void start();
  void stop();

  // False once stopped, or when the ZAP handler died and the socket was closed (fail closed).
  bool serving() const { return serving_.load(); }
  std::uint16_t port() const { return port_; }
  std::string endpoint() const; // "tcp://ADDR:PORT"

  // Queues a frame for the peer; encode errors throw here, on the caller's thread.
  template <class T>
  void send(const std::string& routing_id, const T& msg) {
    send_frame(routing_id, codec_->encode(msg));
  }
  void send(const std::string& routing_id, const caf::message& msg) {
    send_frame(routing_id, codec_->encode(msg));
  }
  void send_frame(const std::string& routing_id, std::string frame);

  frame_stats stats() const { return counters_.snapshot(); }
  std::uint64_t zap_accepted() const { return zap_.accepted(); }
  std::uint64_t zap_denied() const { return zap_.denied(); }

private:
  void run();
  void receive_ready();
  void refuse(const std::string& routing_id, frame_error reason, std::uint32_t type_id,
              const std::string& detail);
  void send_now(const std::string& routing_id, const std::string& frame);

  std::shared_ptr<const wire_codec> codec_;
  server_options options_;
  handler on_message_;
  zmq::context_t ctx_;
  zap_handler zap_;
  detail::wakeup wake_;
  detail::outbox outbox_{wake_};
  zmq::socket_t socket_;
  zmq::socket_t monitor_;
  frame_counters counters_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> zap_died_{false};
  std::atomic<bool> serving_{false};
  std::uint16_t port_ = 0;
  std::thread thread_;
};

} // namespace cohort::net

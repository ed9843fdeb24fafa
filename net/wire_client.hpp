// The node's / client's side of the wire: a CURVE DEALER socket connected to a head, owned by one
// loop thread. ZeroMQ reconnects by itself; the link state (from socket monitor events) says
// whether the handshake completed or the head refused our key. send() may be called from any
// thread; while no connection is up, frames are dropped and counted (heartbeat-friendly).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <caf/message.hpp>
#include <zmq.hpp>

#include "net/codec.hpp"
#include "net/curve.hpp"
#include "net/frame_error.hpp"
#include "net/loop_support.hpp"

namespace cohort::net {

struct cluster_credentials;

// "host:port" or "tcp://host:port" -> "tcp://host:port". Throws net_error naming the address.
std::string tcp_endpoint(const std::string& address);

struct client_options {
  std::string address; // "host:port" or "tcp://host:port"
  std::string server_public_key;
  curve_keypair client_keys;
  int send_hwm = 1000;
  int receive_hwm = 10000;
  bool queue_while_disconnected = false; // false: drop sends while no connection is up
  std::chrono::milliseconds reconnect_interval{100};
  std::chrono::milliseconds reconnect_interval_max{2000};
  std::chrono::milliseconds heartbeat_interval{1000}; // ZMTP pings; 0 disables
  std::chrono::milliseconds heartbeat_timeout{5000};

  // Keys from a credentials file; address from the file unless given.
  static client_options from(const cluster_credentials& creds, const std::string& address = {});
};

enum class link_state {
  connecting,       // no handshake completed yet (or the connection dropped; reconnecting)
  connected,        // CURVE handshake done, the head admitted our key
  refused,          // the head's ZAP handler refused our key
  handshake_failed, // the connection closed during the handshake (e.g. wrong server key)
};

const char* to_string(link_state s);

struct link_status {
  link_state state = link_state::connecting;
  std::uint64_t handshakes = 0;       // completed handshakes (reconnects included)
  std::uint64_t refusals = 0;
  std::uint64_t failed_handshakes = 0;
  std::uint64_t disconnects = 0;
};

class wire_client {
public:
  using handler = std::function<void(caf::message msg)>; // runs on the loop thread
  using link_handler = std::function<void(link_state)>;  // runs on the loop thread

  wire_client(std::shared_ptr<const wire_codec> codec, client_options options, handler on_message,
              link_handler on_link = {});
  ~wire_client();
  wire_client(const wire_client&) = delete;
  wire_client& operator=(const wire_client&) = delete;

  // Connects (asynchronously) and starts the loop. Throws net_error / credentials_error.
  void start();
  void stop();

  // Waits until the state is not `connecting`, or the timeout passes; returns the state then.
  link_state wait_for_link(std::chrono::milliseconds timeout) const;
  // Waits until the link is connected or the head refused our key, or the timeout passes;
  // returns the status then. Failed handshakes (a wrong server key) do not end the wait: ZeroMQ
  // retries them, and the status counts them.
  link_status wait_for_connection(std::chrono::milliseconds timeout) const;
  link_status status() const;

  template <class T>
  void send(const T& msg) {
    send_frame(codec_->encode(msg));
  }
  void send(const caf::message& msg) { send_frame(codec_->encode(msg)); }
  void send_frame(std::string frame);

  frame_stats stats() const { return counters_.snapshot(); }

private:
  void run();
  void receive_ready();
  void on_monitor_event(std::uint16_t event);

  std::shared_ptr<const wire_codec> codec_;
  client_options options_;
  handler on_message_;
  link_handler on_link_;
  zmq::context_t ctx_;
  detail::wakeup wake_;
  detail::outbox outbox_{wake_};
  zmq::socket_t socket_;
  zmq::socket_t monitor_;
  frame_counters counters_;
  mutable std::mutex link_mutex_;
  mutable std::condition_variable link_changed_;
  link_status link_;
  bool handshake_on_connection_ = false; // loop thread only
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

} // namespace cohort::net

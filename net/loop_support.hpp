// Pieces shared by the server and client poll loops: an eventfd that wakes a loop from any
// thread, a mutex-guarded queue of outgoing frames, and a ZeroMQ socket monitor reader.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include <zmq.hpp>

namespace cohort::net::detail {

// Wakes a poll loop: notify() from any thread, the loop polls fd() and drain()s.
class wakeup {
public:
  wakeup();
  ~wakeup();
  wakeup(const wakeup&) = delete;
  wakeup& operator=(const wakeup&) = delete;
  void notify();
  void drain();
  int fd() const { return fd_; }

private:
  int fd_;
};

struct outgoing {
  std::string routing_id; // empty on a DEALER
  std::string frame;
};

// Frames waiting for the loop thread; push from any thread.
class outbox {
public:
  explicit outbox(wakeup& wake) : wake_(wake) {}
  void push(outgoing item);
  std::deque<outgoing> take();

private:
  wakeup& wake_;
  std::mutex mutex_;
  std::deque<outgoing> items_;
};

struct monitor_event {
  std::uint16_t event = 0;
  std::uint32_t value = 0;
};

// Opens a ZMQ socket monitor for `events` on `socket`, as a PAIR socket the loop polls.
zmq::socket_t open_monitor(zmq::context_t& ctx, zmq::socket_t& socket, int events);

// Reads one event if one is waiting.
std::optional<monitor_event> read_monitor_event(zmq::socket_t& monitor);

} // namespace cohort::net::detail

// Pieces shared by the server and client poll loops (see loop_support.hpp).
#include "net/loop_support.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include <sys/eventfd.h>
#include <unistd.h>

#include "net/net_error.hpp"

namespace cohort::net::detail {

wakeup::wakeup() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0)
    throw net_error(std::string{"cannot create an eventfd for a socket loop: "}
                    + std::strerror(errno));
}

wakeup::~wakeup() {
  ::close(fd_);
}

void wakeup::notify() {
  std::uint64_t one = 1;
  // EAGAIN means the counter is already non-zero: the loop wakes anyway.
  while (::write(fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void wakeup::drain() {
  std::uint64_t count = 0;
  while (::read(fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
}

void outbox::push(outgoing item) {
  {
    std::lock_guard<std::mutex> lock{mutex_};
    items_.push_back(std::move(item));
  }
  wake_.notify();
}

std::deque<outgoing> outbox::take() {
  std::lock_guard<std::mutex> lock{mutex_};
  return std::exchange(items_, {});
}

zmq::socket_t open_monitor(zmq::context_t& ctx, zmq::socket_t& socket, int events) {
  static std::atomic<std::uint64_t> next{0};
  std::string endpoint = "inproc://cohort-monitor-" + std::to_string(::getpid()) + "-"
                         + std::to_string(next.fetch_add(1));
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), events) != 0)
    throw net_error("cannot monitor a socket at " + endpoint + ": " + zmq_strerror(zmq_errno()));
  zmq::socket_t monitor{ctx, zmq::socket_type::pair};
  monitor.set(zmq::sockopt::linger, 0);
  monitor.connect(endpoint);
  return monitor;
}

std::optional<monitor_event> read_monitor_event(zmq::socket_t& monitor) {
  zmq::message_t head;
  if (!monitor.recv(head, zmq::recv_flags::dontwait))
    return std::nullopt;
  monitor_event ev;
  if (head.size() >= 6) {
    std::memcpy(&ev.event, head.data(), 2);
    std::memcpy(&ev.value, static_cast<const char*>(head.data()) + 2, 4);
  }
  while (head.more()) { // the endpoint frame
    zmq::message_t rest;
    if (!monitor.recv(rest))
      break;
    head = std::move(rest);
  }
  return ev;
}

} // namespace cohort::net::detail

#include "core/comm/tcp_store_server.hpp"

#include "core/comm/comm_error.hpp"
#include "core/comm/memory_store.hpp"
#include "core/comm/tcp_store_wire.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

namespace cohort::core::comm {
namespace {

using clock = std::chrono::steady_clock;
constexpr std::size_t max_clients = 4096;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw comm_error(comm_errc::store_failure, "tcp_store_server " + where + ": " + what);
}

struct connection {
  int fd = -1;
  std::string in;       // received bytes not yet parsed
  std::string out;      // reply bytes not yet sent
  std::size_t out_sent = 0;
  bool parked = false;  // a get() waits for its key; later frames stay queued until it answers
  bool closed = false;
};

struct waiter {
  std::uint64_t conn;
  clock::time_point deadline;
};

}  // namespace

struct tcp_store_server::impl {
  std::string host;
  std::uint16_t port = 0;
  int listen_fd = -1;
  int wake_fd = -1;
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> clients{0};
  std::thread thread;

  // Owned by the serving thread only.
  std::map<std::uint64_t, connection> conns;
  std::uint64_t next_id = 1;
  std::map<std::string, std::string> values;
  std::multimap<std::string, waiter> waiters;

  void serve();
  void accept_all();
  void read_from(connection& c);
  void flush(connection& c);
  void handle_frames(std::uint64_t id, connection& c);
  bool handle_one(std::uint64_t id, connection& c, const char* data, std::size_t size);
  void reply(connection& c, wire::status st, const std::string& body);
  void expire_waiters();
  void drop_closed();
};

tcp_store_server::tcp_store_server(const std::string& host, std::uint16_t port)
    : impl_(std::make_unique<impl>()) {
  impl_->host = host;
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (rc != 0) fail(where, std::string("cannot resolve: ") + ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* ai = list; ai != nullptr && impl_->listen_fd < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                            ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 512) == 0) {
      impl_->listen_fd = fd;
    } else {
      last_error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(list);
  if (impl_->listen_fd < 0) fail(where, "cannot listen: " + last_error);

  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  impl_->port = ntohs(addr.ss_family == AF_INET6
                          ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                          : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  impl_->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl_->wake_fd < 0) {
    ::close(impl_->listen_fd);
    fail(where, std::string("eventfd: ") + std::strerror(errno));
  }
  impl_->thread = std::thread([this] { impl_->serve(); });
}

tcp_store_server::~tcp_store_server() {
  impl_->stop = true;
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(impl_->wake_fd, &one, sizeof(one));
  impl_->thread.join();
  for (auto& [id, c] : impl_->conns) ::close(c.fd);
  ::close(impl_->listen_fd);
  ::close(impl_->wake_fd);
}

std::uint16_t tcp_store_server::port() const { return impl_->port; }
const std::string& tcp_store_server::host() const { return impl_->host; }
std::size_t tcp_store_server::client_count() const { return impl_->clients.load(); }

void tcp_store_server::impl::serve() {
  std::vector<pollfd> fds;
  std::vector<std::uint64_t> ids;
  while (!stop) {
    fds.clear();
    ids.clear();
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({listen_fd, POLLIN, 0});
    for (auto& [id, c] : conns) {
      short events = 0;
      if (c.in.size() < wire::max_frame_bytes + 4) events |= POLLIN;
      if (c.out_sent < c.out.size()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      ids.push_back(id);
    }
    int timeout_ms = -1;
    if (!waiters.empty()) {
      auto first = std::min_element(waiters.begin(), waiters.end(), [](const auto& a, const auto& b) {
                     return a.second.deadline < b.second.deadline;
                   })->second.deadline;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(first - clock::now());
      timeout_ms = static_cast<int>(std::clamp<std::int64_t>(left.count() + 1, 0, 1 << 30));
    }
    const int r = ::poll(fds.data(), fds.size(), timeout_ms);
    if (r < 0 && errno != EINTR) break;  // cannot happen with valid fds; stop serving
    if (stop) break;
    if (r > 0) {
      if (fds[1].revents & POLLIN) accept_all();
      for (std::size_t i = 0; i < ids.size(); ++i) {
        auto it = conns.find(ids[i]);
        if (it == conns.end() || fds[i + 2].revents == 0) continue;
        if (fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) read_from(it->second);
        if (fds[i + 2].revents & POLLOUT) flush(it->second);
      }
    }
    expire_waiters();
    // A SET may have answered parked clients anywhere: let every client progress.
    for (auto& [id, c] : conns) handle_frames(id, c);
    drop_closed();
  }
}

void tcp_store_server::impl::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a connection that vanished before we took it
    if (conns.size() >= max_clients) {
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    connection c;
    c.fd = fd;
    conns.emplace(next_id++, std::move(c));
    clients = conns.size();
  }
}

void tcp_store_server::impl::read_from(connection& c) {
  char buf[65536];
  while (!c.closed && c.in.size() < wire::max_frame_bytes + 4) {
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.append(buf, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      c.closed = true;  // orderly close or reset: the client vanished
    }
  }
}

void tcp_store_server::impl::flush(connection& c) {
  while (!c.closed && c.out_sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      c.closed = true;
    }
  }
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
  }
}

void tcp_store_server::impl::reply(connection& c, wire::status st, const std::string& body) {
  std::string payload;
  wire::put_u8(payload, static_cast<std::uint8_t>(st));
  payload += body;
  c.out += wire::frame(payload);
  flush(c);
}

void tcp_store_server::impl::handle_frames(std::uint64_t id, connection& c) {
  std::size_t pos = 0;
  // Backpressure: a client that does not read its replies gets no new ones.
  while (!c.closed && !c.parked && c.out.empty() && c.in.size() - pos >= 4) {
    const std::uint32_t len = wire::read_u32_at(c.in.data() + pos);
    if (len == 0 || len > wire::max_frame_bytes) {
      c.closed = true;  // malformed length: drop this client only
      break;
    }
    if (c.in.size() - pos - 4 < len) break;
    if (!handle_one(id, c, c.in.data() + pos + 4, len)) {
      c.closed = true;
      break;
    }
    pos += 4 + len;
  }
  c.in.erase(0, pos);
}

// Executes one request; false when it is malformed (the caller drops the client).
bool tcp_store_server::impl::handle_one(std::uint64_t id, connection& c, const char* data,
                                        std::size_t size) {
  wire::reader r(data, size);
  const auto op = static_cast<wire::op>(r.u8());
  std::string body;
  switch (op) {
    case wire::op::set: {
      std::string key = r.str(max_store_key_bytes);
      std::string value = r.str(max_store_value_bytes);
      if (!r.ok() || !r.at_end() || key.empty()) return false;
      auto range = waiters.equal_range(key);
      std::string answer;
      wire::put_str(answer, value);
      for (auto it = range.first; it != range.second; ++it) {
        auto w = conns.find(it->second.conn);
        if (w == conns.end()) continue;
        w->second.parked = false;
        reply(w->second, wire::status::ok, answer);
      }
      waiters.erase(range.first, range.second);
      values[key] = std::move(value);
      reply(c, wire::status::ok, body);
      return true;
    }
    case wire::op::get: {
      std::string key = r.str(max_store_key_bytes);
      const std::uint64_t timeout_ms = r.u64();
      if (!r.ok() || !r.at_end() || key.empty()) return false;
      auto it = values.find(key);
      if (it != values.end()) {
        wire::put_str(body, it->second);
        reply(c, wire::status::ok, body);
      } else {
        const auto capped = std::min<std::uint64_t>(timeout_ms, 7ull * 24 * 3600 * 1000);
        c.parked = true;
        waiters.emplace(key, waiter{id, clock::now() + std::chrono::milliseconds(capped)});
      }
      return true;
    }
    case wire::op::add: {
      std::string key = r.str(max_store_key_bytes);
      const auto delta = static_cast<std::int64_t>(r.u64());
      if (!r.ok() || !r.at_end() || key.empty()) return false;
      std::int64_t result = 0;
      try {
        auto it = values.find(key);
        result = (it == values.end() ? 0 : parse_counter(key, it->second)) + delta;
      } catch (const comm_error& e) {
        wire::put_str(body, e.what());
        reply(c, wire::status::error, body);
        return true;
      }
      // An add() also wakes clients waiting for the counter's key.
      std::string text = std::to_string(result);
      std::string answer;
      wire::put_str(answer, text);
      auto range = waiters.equal_range(key);
      for (auto w = range.first; w != range.second; ++w) {
        auto wc = conns.find(w->second.conn);
        if (wc == conns.end()) continue;
        wc->second.parked = false;
        reply(wc->second, wire::status::ok, answer);
      }
      waiters.erase(range.first, range.second);
      values[key] = std::move(text);
      wire::put_u64(body, static_cast<std::uint64_t>(result));
      reply(c, wire::status::ok, body);
      return true;
    }
    case wire::op::check: {
      const std::uint32_t n = r.u32();
      if (!r.ok() || n > wire::max_check_keys) return false;
      bool all = true;
      for (std::uint32_t i = 0; i < n; ++i) {
        std::string key = r.str(max_store_key_bytes);
        if (!r.ok()) return false;
        all = all && values.count(key) > 0;
      }
      if (!r.at_end()) return false;
      wire::put_u8(body, all ? 1 : 0);
      reply(c, wire::status::ok, body);
      return true;
    }
    case wire::op::remove: {
      std::string key = r.str(max_store_key_bytes);
      if (!r.ok() || !r.at_end() || key.empty()) return false;
      wire::put_u8(body, values.erase(key) > 0 ? 1 : 0);
      reply(c, wire::status::ok, body);
      return true;
    }
  }
  return false;  // unknown op
}

void tcp_store_server::impl::expire_waiters() {
  const auto now = clock::now();
  for (auto it = waiters.begin(); it != waiters.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    auto c = conns.find(it->second.conn);
    if (c != conns.end()) {
      std::string body;
      wire::put_str(body, "key '" + it->first + "' was not set in time");
      c->second.parked = false;
      reply(c->second, wire::status::timeout, body);
    }
    it = waiters.erase(it);
  }
}

void tcp_store_server::impl::drop_closed() {
  for (auto it = conns.begin(); it != conns.end();) {
    if (!it->second.closed) {
      ++it;
      continue;
    }
    const std::uint64_t id = it->first;
    for (auto w = waiters.begin(); w != waiters.end();)
      w = w->second.conn == id ? waiters.erase(w) : std::next(w);
    ::close(it->second.fd);
    it = conns.erase(it);
  }
  clients = conns.size();
}

}  // namespace cohort::core::comm

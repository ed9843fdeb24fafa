// The TCP rendezvous store server the job's trainer owns (see tcp_store_server.hpp).
#include "core/comm/tcp_store_server.hpp"

#include "core/comm/comm_error.hpp"
#include "core/comm/memory_store.hpp"
#include "core/comm/store_auth.hpp"
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
#include <optional>
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
  std::string peer;     // HOST:PORT, for refusal reports
  std::string in;       // received bytes of the current frame (never more than one frame)
  std::string out;      // reply bytes not yet sent
  std::size_t out_sent = 0;
  bool parked = false;  // a get() waits for its key; the next frame is not read until it answers
  bool closed = false;
  unsigned char server_nonce[wire::nonce_bytes];
  clock::time_point auth_deadline;
  std::optional<wire::session> session;  // set once the client proved it holds the secret
};

// How many bytes of c.in the server needs before it can act on them: the handshake frame, else
// the current frame's length header, then the frame whose length it announced. A length out of
// bounds stops reading there (handle_frames drops the client); so does the handshake.
std::size_t wanted(const connection& c) {
  if (!c.session) return 4 + wire::auth_bytes;
  if (c.in.size() < 4) return 4;
  const std::uint32_t len = wire::read_u32_at(c.in.data());
  if (len < 1 + wire::tag_bytes || len > wire::max_frame_bytes) return 4;
  return 4 + std::size_t{len};
}

std::string peer_name(const sockaddr_storage& addr, socklen_t len) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, port,
                    sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "an unknown address";
  return addr.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + port
                                    : std::string(host) + ":" + port;
}

struct waiter {
  std::uint64_t conn;
  clock::time_point deadline;
};

}  // namespace

struct tcp_store_server::impl {
  std::string host;
  std::uint16_t port = 0;
  std::string secret;
  refusal_callback on_refusal;
  int listen_fd = -1;
  int wake_fd = -1;
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> clients{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::size_t> held{0};
  std::atomic<std::size_t> buffered{0};
  std::thread thread;

  // Owned by the serving thread only.
  std::map<std::uint64_t, connection> conns;
  std::uint64_t next_id = 1;
  bounded_values values;
  std::multimap<std::string, waiter> waiters;

  void serve();
  void accept_all();
  void read_from(connection& c);
  void flush(connection& c);
  void handle_frames(std::uint64_t id, connection& c);
  void authenticate(connection& c);
  void handle_one(std::uint64_t id, connection& c, const wire::request& req);
  void reply(connection& c, wire::status st, const std::string& body);
  void wake_waiters(const std::string& key, const std::string& value);
  // Closes c and counts it: refused (at connect) or dropped (after), with the reason reported.
  void refuse(connection& c, const std::string& reason);
  void expire_waiters();
  void expire_handshakes();
  void drop_closed();
};

tcp_store_server::tcp_store_server(const std::string& host, std::uint16_t port, std::string secret,
                                   refusal_callback on_refusal)
    : impl_(std::make_unique<impl>()) {
  impl_->host = host;
  const std::string where = host + ":" + std::to_string(port);
  validate_store_secret(secret, "tcp_store_server " + where);
  impl_->secret = std::move(secret);
  impl_->on_refusal = std::move(on_refusal);
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
std::uint64_t tcp_store_server::refused_count() const { return impl_->refused.load(); }
std::uint64_t tcp_store_server::dropped_count() const { return impl_->dropped.load(); }
std::size_t tcp_store_server::held_bytes() const { return impl_->held.load(); }
std::size_t tcp_store_server::buffered_bytes() const { return impl_->buffered.load(); }

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
      if (c.in.size() < wanted(c)) events |= POLLIN;
      if (c.out_sent < c.out.size()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      ids.push_back(id);
    }
    std::optional<clock::time_point> first;
    for (const auto& [key, w] : waiters)
      if (!first || w.deadline < *first) first = w.deadline;
    for (const auto& [id, c] : conns)
      if (!c.session && (!first || c.auth_deadline < *first)) first = c.auth_deadline;
    int timeout_ms = -1;
    if (first) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*first - clock::now());
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
        connection& c = it->second;
        if (fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) read_from(c);
        // Hung up while the server is not reading (a parked client with its next frame in):
        // nothing more can come, and the reply could not go out.
        if ((fds[i + 2].revents & (POLLHUP | POLLERR)) && c.in.size() >= wanted(c)) c.closed = true;
        if (fds[i + 2].revents & POLLOUT) flush(c);
      }
    }
    expire_waiters();
    expire_handshakes();
    // A SET may have answered parked clients anywhere: let every client progress.
    for (auto& [id, c] : conns) handle_frames(id, c);
    drop_closed();
    std::size_t pending = 0;
    for (const auto& [id, c] : conns) pending += c.in.size() + (c.out.size() - c.out_sent);
    buffered = pending;
  }
}

void tcp_store_server::impl::accept_all() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a connection that vanished before we took it
    connection c;
    c.fd = fd;
    c.peer = peer_name(addr, len);
    const auto pending = static_cast<std::size_t>(
        std::count_if(conns.begin(), conns.end(), [](const auto& e) { return !e.second.session; }));
    if (conns.size() >= max_clients || pending >= max_pending_clients) {
      refuse(c, conns.size() >= max_clients
                    ? "the store serves its limit of " + std::to_string(max_clients) + " clients"
                    : std::to_string(max_pending_clients) +
                          " connections are already waiting to authenticate (max_pending_clients)");
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    wire::random_nonce(c.server_nonce);
    c.auth_deadline = clock::now() + handshake_timeout;
    std::string hello;
    wire::put_u8(hello, wire::protocol_version);
    hello.append(reinterpret_cast<const char*>(c.server_nonce), wire::nonce_bytes);
    c.out = wire::frame(hello);
    flush(c);
    conns.emplace(next_id++, std::move(c));
    clients = conns.size();
  }
}

void tcp_store_server::impl::refuse(connection& c, const std::string& reason) {
  c.closed = true;
  const bool after_auth = c.session.has_value();
  (after_auth ? dropped : refused) += 1;
  if (!on_refusal) return;
  try {
    on_refusal(store_refusal{c.peer, reason, after_auth, refused.load(), dropped.load()});
  } catch (...) {
    // A report that cannot be made must not stop the store.
  }
}

void tcp_store_server::impl::expire_handshakes() {
  const auto now = clock::now();
  for (auto& [id, c] : conns)
    if (!c.session && !c.closed && c.auth_deadline <= now)
      refuse(c, "did not authenticate within " + std::to_string(handshake_timeout.count()) + " s");
}

void tcp_store_server::impl::read_from(connection& c) {
  char buf[65536];
  while (!c.closed && c.in.size() < wanted(c)) {
    const ssize_t n = ::recv(c.fd, buf, std::min(sizeof(buf), wanted(c) - c.in.size()), 0);
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
  c.out += c.session->seal(payload);
  flush(c);
}

void tcp_store_server::impl::authenticate(connection& c) {
  const std::uint32_t len = wire::read_u32_at(c.in.data());
  if (len != wire::auth_bytes) {
    refuse(c, "sent a frame of " + std::to_string(len) + " bytes where the " +
                  std::to_string(wire::auth_bytes) +
                  "-byte authentication was due (an unauthenticated or old-protocol client)");
    return;
  }
  const auto* body = reinterpret_cast<const unsigned char*>(c.in.data() + 4);
  if (!wire::check_client_proof(secret, c.server_nonce, body, body + wire::nonce_bytes)) {
    refuse(c, "wrong authentication proof (the client does not hold this attempt's store secret)");
    return;
  }
  c.session.emplace(secret, c.server_nonce, body, wire::session::side::server);
  c.in.clear();
  reply(c, wire::status::ok, {});  // sealed: proves this server holds the secret too
}

void tcp_store_server::impl::handle_frames(std::uint64_t id, connection& c) {
  // Backpressure: a client that does not read its replies gets no new ones.
  while (!c.closed && !c.parked && c.out.empty() && c.in.size() >= 4) {
    if (!c.session) {
      if (c.in.size() < wanted(c) && wire::read_u32_at(c.in.data()) == wire::auth_bytes) return;
      authenticate(c);
      continue;
    }
    const std::uint32_t len = wire::read_u32_at(c.in.data());
    if (len < 1 + wire::tag_bytes || len > wire::max_frame_bytes) {
      refuse(c, "announced a frame of " + std::to_string(len) + " bytes; frames have " +
                    std::to_string(1 + wire::tag_bytes) + ".." + std::to_string(wire::max_frame_bytes) +
                    " (a value may have at most max_store_value_bytes = " +
                    std::to_string(max_store_value_bytes) + ")");
      return;
    }
    if (c.in.size() < 4 + std::size_t{len}) return;
    if (!c.session->open(c.in.data() + 4, len)) {
      refuse(c, "sent a frame that fails its MAC (altered, replayed or out of order)");
      return;
    }
    wire::request req;
    const auto error = wire::decode_request(c.in.data() + 4, len - wire::tag_bytes, req);
    c.in.clear();
    if (error != wire::decode_error::none) {
      refuse(c, std::string("sent a malformed request: ") + wire::to_string(error));
      return;
    }
    handle_one(id, c, req);
  }
}

void tcp_store_server::impl::wake_waiters(const std::string& key, const std::string& value) {
  auto range = waiters.equal_range(key);
  std::string answer;
  wire::put_str(answer, value);
  for (auto it = range.first; it != range.second; ++it) {
    auto w = conns.find(it->second.conn);
    if (w == conns.end() || w->second.closed) continue;
    w->second.parked = false;
    reply(w->second, wire::status::ok, answer);
  }
  waiters.erase(range.first, range.second);
}

// Executes one well-formed request; a bound it breaks is answered with an error naming it.
void tcp_store_server::impl::handle_one(std::uint64_t id, connection& c, const wire::request& req) {
  std::string body;
  const auto refuse_request = [&](const std::string& why) {
    wire::put_str(body, why);
    reply(c, wire::status::error, body);
  };
  switch (req.kind) {
    case wire::op::set: {
      try {
        values.put(req.key, req.value, "tcp_store_server set");
        held = values.bytes();
      } catch (const comm_error& e) {
        refuse_request(e.what());
        return;
      }
      wake_waiters(req.key, req.value);
      reply(c, wire::status::ok, body);
      return;
    }
    case wire::op::get: {
      if (const std::string* v = values.find(req.key)) {
        wire::put_str(body, *v);
        reply(c, wire::status::ok, body);
      } else {
        const auto capped = std::min<std::uint64_t>(req.timeout_ms, 7ull * 24 * 3600 * 1000);
        c.parked = true;
        waiters.emplace(req.key, waiter{id, clock::now() + std::chrono::milliseconds(capped)});
      }
      return;
    }
    case wire::op::add: {
      std::string text;
      try {
        const std::string* held_value = values.find(req.key);
        const std::int64_t result = (held_value == nullptr ? 0 : parse_counter(req.key, *held_value)) + req.delta;
        text = std::to_string(result);
        values.put(req.key, text, "tcp_store_server add");
        held = values.bytes();
        wire::put_u64(body, static_cast<std::uint64_t>(result));
      } catch (const comm_error& e) {
        refuse_request(e.what());
        return;
      }
      // An add() also wakes clients waiting for the counter's key.
      wake_waiters(req.key, text);
      reply(c, wire::status::ok, body);
      return;
    }
    case wire::op::check: {
      bool all = true;
      for (const auto& key : req.keys) all = all && values.contains(key);
      wire::put_u8(body, all ? 1 : 0);
      reply(c, wire::status::ok, body);
      return;
    }
    case wire::op::remove: {
      wire::put_u8(body, values.erase(req.key) ? 1 : 0);
      held = values.bytes();
      reply(c, wire::status::ok, body);
      return;
    }
  }
}

void tcp_store_server::impl::expire_waiters() {
  const auto now = clock::now();
  for (auto it = waiters.begin(); it != waiters.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    auto c = conns.find(it->second.conn);
    if (c != conns.end() && !c->second.closed) {
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

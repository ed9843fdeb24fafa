// The client of tcp_store_server: one TCP connection, one request at a time (see tcp_store.hpp).
#include "core/comm/tcp_store.hpp"

#include "core/comm/comm_error.hpp"
#include "core/comm/tcp_store_wire.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

namespace cohort::core::comm {
namespace {

using clock = std::chrono::steady_clock;
// Slack on top of a get()'s own timeout before the client gives up on the server's reply.
constexpr auto reply_grace = std::chrono::seconds(10);
constexpr auto plain_reply_timeout = std::chrono::seconds(60);

int remaining_ms(clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30));
}

// Waits until fd is ready for events; false on deadline.
bool wait_fd(int fd, short events, clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR)
      throw comm_error(comm_errc::store_failure, std::string("tcp_store: poll: ") + std::strerror(errno));
  }
}

// Sends all of out before deadline; returns an empty string, or why it could not.
std::string send_all(int fd, const std::string& out, clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_fd(fd, POLLOUT, deadline)) return "timed out sending";
    } else {
      return std::string("send failed: ") + std::strerror(errno);
    }
  }
  return {};
}

enum class received { frame, closed, failed };

// Receives one frame body of min_len..max_len bytes (the length is checked before the body is
// read); otherwise says whether the server closed the connection or what else failed (in why).
received recv_frame(int fd, std::size_t min_len, std::size_t max_len, clock::time_point deadline,
                    std::string& body, std::string& why) {
  std::string in;
  std::size_t want = 4;
  bool have_header = false;
  while (in.size() < want) {
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, std::min(sizeof(buf), want - in.size()), 0);
    if (n > 0) {
      in.append(buf, static_cast<std::size_t>(n));
      if (!have_header && in.size() == 4) {
        const std::uint32_t len = wire::read_u32_at(in.data());
        if (len < min_len || len > max_len) {
          why = "server sent a frame of " + std::to_string(len) + " bytes (expected " +
                std::to_string(min_len) + ".." + std::to_string(max_len) + ")";
          return received::failed;
        }
        want = 4 + len;
        in.reserve(want);
        have_header = true;
      }
    } else if (n == 0) {
      why = "server closed the connection";
      return received::closed;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!wait_fd(fd, POLLIN, deadline)) {
        why = "no reply from the server in time";
        return received::failed;
      }
    } else {
      why = std::string("recv failed: ") + std::strerror(errno);
      return received::failed;
    }
  }
  body = in.substr(4);
  return received::frame;
}

}  // namespace

host_port parse_host_port(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return comm_error(comm_errc::invalid_argument,
                      "store address '" + text + "': " + why +
                          " (expected HOST:PORT, e.g. 127.0.0.1:29500 or [::1]:29500)");
  };
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) throw bad("missing host or port");
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) throw bad("empty host");
  const std::string port_text = text.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || value == 0 || value > 65535)
    throw bad("port must be 1..65535, got '" + port_text + "'");
  return {host, static_cast<std::uint16_t>(value)};
}

tcp_store::tcp_store(std::string host, std::uint16_t port, std::string secret,
                     std::chrono::milliseconds connect_timeout)
    : host_(std::move(host)), port_(port), secret_(std::move(secret)), connect_timeout_(connect_timeout) {
  validate_store_secret(secret_, "tcp_store " + host_ + ":" + std::to_string(port_));
  std::lock_guard<std::mutex> lock(mutex_);
  connect_locked(connect_timeout_);
}

tcp_store::~tcp_store() { close_locked(); }

void tcp_store::close_locked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  session_.reset();
}

bool tcp_store::authenticate_locked(clock::time_point deadline, std::string& retry_reason) {
  const std::string where = "tcp_store " + host_ + ":" + std::to_string(port_);
  const auto refuse = [&](const std::string& why) {
    close_locked();
    return comm_error(comm_errc::store_failure, where + ": authentication failed: " + why);
  };
  std::string hello, why;
  if (const auto r = recv_frame(fd_, wire::hello_bytes, wire::hello_bytes, deadline, hello, why);
      r != received::frame) {
    if (r == received::failed)
      throw refuse("no greeting from the store: " + why + " (is this a cohort store?)");
    // Closed before greeting: the store is at its limit of clients; try again.
    close_locked();
    retry_reason = "the store closed the connection before greeting (at its client limit?)";
    return false;
  }
  if (static_cast<std::uint8_t>(hello[0]) != wire::protocol_version)
    throw refuse("the store speaks protocol " + std::to_string(static_cast<std::uint8_t>(hello[0])) +
                 ", this client " + std::to_string(wire::protocol_version));
  const auto* server_nonce = reinterpret_cast<const unsigned char*>(hello.data() + 1);
  unsigned char client_nonce[wire::nonce_bytes];
  unsigned char proof[wire::tag_bytes];
  wire::random_nonce(client_nonce);
  wire::client_proof(secret_, server_nonce, client_nonce, proof);
  std::string auth(reinterpret_cast<const char*>(client_nonce), wire::nonce_bytes);
  auth.append(reinterpret_cast<const char*>(proof), wire::tag_bytes);
  if (auto e = send_all(fd_, wire::frame(auth), deadline); !e.empty()) throw refuse(e);
  auto session = std::make_unique<wire::session>(secret_, server_nonce, client_nonce,
                                                 wire::session::side::client);
  std::string welcome;
  if (const auto r = recv_frame(fd_, 1 + wire::tag_bytes, 1 + wire::tag_bytes, deadline, welcome, why);
      r != received::frame)
    throw refuse(r == received::closed
                     ? "the store refused this client's proof (closed the connection): it was not "
                       "given this attempt's store secret"
                     : why);
  if (!session->open(welcome.data(), welcome.size()) ||
      static_cast<std::uint8_t>(welcome[0]) != static_cast<std::uint8_t>(wire::status::ok))
    throw refuse("the store could not prove it holds this attempt's secret (its welcome fails the "
                 "MAC): not the attempt's store");
  session_ = std::move(session);
  return true;
}

void tcp_store::connect_locked(std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  const std::string where = "tcp_store " + host_ + ":" + std::to_string(port_);
  auto pause = std::chrono::milliseconds(10);
  std::string last_error = "no address";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    const int rc = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &list);
    if (rc != 0)
      throw comm_error(comm_errc::store_failure,
                       where + ": cannot resolve host: " + ::gai_strerror(rc));
    for (addrinfo* ai = list; ai != nullptr && fd_ < 0; ai = ai->ai_next) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                              ai->ai_protocol);
      if (fd < 0) {
        last_error = std::strerror(errno);
        continue;
      }
      int ok = ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
      if (ok == EINPROGRESS) {
        if (!wait_fd(fd, POLLOUT, deadline)) {
          ok = ETIMEDOUT;
        } else {
          socklen_t len = sizeof(ok);
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &ok, &len);
        }
      }
      if (ok == 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fd_ = fd;
      } else {
        last_error = std::strerror(ok);
        ::close(fd);
      }
    }
    ::freeaddrinfo(list);
    if (fd_ >= 0 && authenticate_locked(deadline, last_error)) return;
    if (clock::now() + pause >= deadline)
      throw comm_error(comm_errc::store_failure,
                       where + ": cannot connect within " + std::to_string(timeout.count()) +
                           " ms: " + last_error + " (is the job's trainer serving the store?)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

std::string tcp_store::request(const std::string& payload, std::chrono::milliseconds reply_timeout,
                               const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string where = "tcp_store " + host_ + ":" + std::to_string(port_) + " " + what;
  if (fd_ < 0) connect_locked(connect_timeout_);
  const auto deadline = clock::now() + reply_timeout;
  const auto io_fail = [&](const std::string& why) {
    close_locked();
    return comm_error(comm_errc::store_failure, where + ": " + why);
  };

  if (auto e = send_all(fd_, session_->seal(payload), deadline); !e.empty())
    throw io_fail(e + " (the request)");
  std::string in, why;
  if (recv_frame(fd_, 1 + wire::tag_bytes, wire::max_frame_bytes, deadline, in, why) != received::frame)
    throw io_fail(why);
  if (!session_->open(in.data(), in.size()))
    throw io_fail("the reply fails its MAC (altered, replayed or out of order): connection dropped");
  in.resize(in.size() - wire::tag_bytes);
  const auto st = static_cast<wire::status>(static_cast<std::uint8_t>(in[0]));
  std::string body = in.substr(1);
  if (st == wire::status::ok) return body;
  wire::reader r(body.data(), body.size());
  const std::string message = r.str(wire::max_frame_bytes);
  if (!r.ok()) throw io_fail("server sent a malformed error reply");
  if (st == wire::status::timeout) throw comm_error(comm_errc::timeout, where + ": " + message);
  throw comm_error(comm_errc::store_failure, where + ": server refused: " + message);
}

void tcp_store::set(const std::string& key, const std::string& value) {
  validate_store_key(key, "tcp_store::set");
  validate_store_value(value, "tcp_store::set");
  std::string p;
  wire::put_u8(p, static_cast<std::uint8_t>(wire::op::set));
  wire::put_str(p, key);
  wire::put_str(p, value);
  request(p, plain_reply_timeout, "set('" + key + "')");
}

std::string tcp_store::get(const std::string& key, std::chrono::milliseconds timeout) {
  validate_store_key(key, "tcp_store::get");
  std::string p;
  wire::put_u8(p, static_cast<std::uint8_t>(wire::op::get));
  wire::put_str(p, key);
  wire::put_u64(p, static_cast<std::uint64_t>(std::max<std::int64_t>(timeout.count(), 0)));
  const std::string body = request(p, timeout + reply_grace, "get('" + key + "')");
  wire::reader r(body.data(), body.size());
  std::string value = r.str(max_store_value_bytes);
  if (!r.ok() || !r.at_end())
    throw comm_error(comm_errc::store_failure, "tcp_store get('" + key + "'): malformed reply");
  return value;
}

std::int64_t tcp_store::add(const std::string& key, std::int64_t delta) {
  validate_store_key(key, "tcp_store::add");
  std::string p;
  wire::put_u8(p, static_cast<std::uint8_t>(wire::op::add));
  wire::put_str(p, key);
  wire::put_u64(p, static_cast<std::uint64_t>(delta));
  const std::string body = request(p, plain_reply_timeout, "add('" + key + "')");
  wire::reader r(body.data(), body.size());
  const auto v = static_cast<std::int64_t>(r.u64());
  if (!r.ok() || !r.at_end())
    throw comm_error(comm_errc::store_failure, "tcp_store add('" + key + "'): malformed reply");
  return v;
}

bool tcp_store::check(const std::vector<std::string>& keys) {
  if (keys.size() > wire::max_check_keys)
    throw comm_error(comm_errc::invalid_argument,
                     "tcp_store::check: at most " + std::to_string(wire::max_check_keys) +
                         " keys per call, got " + std::to_string(keys.size()));
  std::string p;
  wire::put_u8(p, static_cast<std::uint8_t>(wire::op::check));
  wire::put_u32(p, static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) {
    validate_store_key(k, "tcp_store::check");
    wire::put_str(p, k);
  }
  const std::string body = request(p, plain_reply_timeout, "check");
  if (body.size() != 1) throw comm_error(comm_errc::store_failure, "tcp_store check: malformed reply");
  return body[0] != 0;
}

bool tcp_store::remove(const std::string& key) {
  validate_store_key(key, "tcp_store::remove");
  std::string p;
  wire::put_u8(p, static_cast<std::uint8_t>(wire::op::remove));
  wire::put_str(p, key);
  const std::string body = request(p, plain_reply_timeout, "remove('" + key + "')");
  if (body.size() != 1)
    throw comm_error(comm_errc::store_failure, "tcp_store remove('" + key + "'): malformed reply");
  return body[0] != 0;
}

}  // namespace cohort::core::comm

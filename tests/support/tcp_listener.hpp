// A TCP socket listening on an IPv4 address and port of the calling thread's network namespace,
// closed when it goes: for tests that hold a port (so that no other process binds it) or stand up
// a peer that connections reach.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace cohort::test {

class tcp_listener {
 public:
  // Listens on address:port (port 0: any free one); with reuse_address, SO_REUSEADDR first (a port
  // that a closed connection left in TIME_WAIT). bound() says whether it could, error() why not.
  tcp_listener(const std::string& address, int port, bool reuse_address = false) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
    socklen_t length = sizeof a;
    const int one = 1;
    if (fd_ < 0 || (reuse_address && ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) ||
        ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &length) != 0) {
      error_ = std::strerror(errno);
      close();
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  tcp_listener(tcp_listener&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), port_(other.port_), error_(std::move(other.error_)) {}
  tcp_listener(const tcp_listener&) = delete;
  tcp_listener& operator=(const tcp_listener&) = delete;
  tcp_listener& operator=(tcp_listener&&) = delete;
  ~tcp_listener() { close(); }

  bool bound() const { return fd_ >= 0; }
  int port() const { return port_; }  // the port it holds (0 where it could not bind)
  const std::string& error() const { return error_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::string error_;
};

}  // namespace cohort::test

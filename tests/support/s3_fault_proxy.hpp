// An HTTP proxy between an S3 client and the test S3 server (s3_server.hpp) that records what
// passes and injects faults: requests whose request line contains a given text can be answered
// "500 InternalError" without reaching the server, a given number of times, or held until a given
// number of them are there at once (which shows a client sends them together). The S3 client opens
// one connection per request and asks the server to close it (Connection: close), so the proxy
// handles one request per connection, each on a thread of its own, relaying the server's whole
// answer once the server closed. Its destructor stops accepting and joins every thread.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cohort::test {

class s3_fault_proxy {
 public:
  // One request that reached the server: its request line, Range header ("" without one), the
  // answer's status and body length.
  struct exchange {
    std::string request_line;
    std::string range;
    int status = 0;
    std::uint64_t body_bytes = 0;
  };

  explicit s3_fault_proxy(int server_port) : server_port_(server_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_, 64) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("s3_fault_proxy: cannot listen on 127.0.0.1");
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~s3_fault_proxy() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      together_.notify_all();  // held requests go on
    }
    ::shutdown(listener_, SHUT_RDWR);  // wakes accept()
    acceptor_.join();
    ::close(listener_);
    std::vector<std::thread> connections;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      connections.swap(connections_);  // the acceptor is gone: no more come
    }
    for (auto& t : connections) t.join();
  }
  s3_fault_proxy(const s3_fault_proxy&) = delete;
  s3_fault_proxy& operator=(const s3_fault_proxy&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // The next `count` requests whose request line contains `text` get a 500 from the proxy.
  void fail_next(int count, std::string text) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_count_ = count;
    fail_text_ = std::move(text);
  }
  int failures_served() const { return failures_served_; }
  // The next requests whose request line contains `text` are held until `count` of them are there
  // at once, then all go on. Each waits at most `limit`: a client that sends them one at a time
  // still gets answers, late, and held_together() stays false.
  void hold_until_together(int count, std::string text, std::chrono::seconds limit) {
    std::lock_guard<std::mutex> lock(mutex_);
    hold_count_ = count;
    hold_text_ = std::move(text);
    hold_limit_ = limit;
  }
  bool held_together() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_together_;
  }
  // The requests that reached the server since the last clear(), in the order they were answered.
  std::vector<exchange> exchanges() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return exchanges_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    exchanges_.clear();
  }

 private:
  void accept_loop() {
    while (!stopping_) {
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) continue;  // shut down (stopping_), or a connection reset before accept
      std::lock_guard<std::mutex> lock(mutex_);
      connections_.emplace_back([this, fd] { serve(fd); });
    }
  }

  static bool send_all(int fd, const char* p, std::size_t n) {
    while (n > 0) {
      const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
      if (k <= 0) return false;
      p += k;
      n -= static_cast<std::size_t>(k);
    }
    return true;
  }

  // The value of header `name` (lower case) in a request or answer head, or "".
  static std::string header(const std::string& head, const std::string& name) {
    std::string lower = head;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    const auto at = lower.find("\r\n" + name + ":");
    if (at == std::string::npos) return "";
    const auto begin = head.find_first_not_of(' ', at + 3 + name.size());
    return head.substr(begin, head.find("\r\n", begin) - begin);
  }

  // Reads one request (head and Content-Length body) from `fd`; false when the client went away.
  static bool read_request(int fd, std::string& request, std::string& head) {
    char buf[65536];
    std::size_t head_end = std::string::npos;
    while ((head_end = request.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t k = ::recv(fd, buf, sizeof buf, 0);
      if (k <= 0) return false;
      request.append(buf, static_cast<std::size_t>(k));
    }
    head = request.substr(0, head_end + 2);
    const std::string length = header(head, "content-length");
    const std::size_t want = head_end + 4 + (length.empty() ? 0 : std::stoull(length));
    while (request.size() < want) {
      const ssize_t k = ::recv(fd, buf, sizeof buf, 0);
      if (k <= 0) return false;
      request.append(buf, static_cast<std::size_t>(k));
    }
    return true;
  }

  bool take_fault(const std::string& request_line) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_count_ <= 0 || request_line.find(fail_text_) == std::string::npos) return false;
    --fail_count_;
    ++failures_served_;
    return true;
  }

  // hold_until_together: waits while fewer than hold_count_ requests like `request_line` are
  // here (at most hold_limit_); the one that makes the count wakes the others.
  void hold(const std::string& request_line) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (hold_count_ <= 0 || held_together_ || request_line.find(hold_text_) == std::string::npos) return;
    if (++held_ >= hold_count_) {
      held_together_ = true;
      together_.notify_all();
      return;
    }
    together_.wait_for(lock, hold_limit_, [this] { return held_together_ || stopping_.load(); });
    if (!held_together_) --held_;  // it went on alone: no longer here
  }

  void serve(int client) {
    std::string request, head;
    if (read_request(client, request, head)) {
      const std::string line = head.substr(0, head.find("\r\n"));
      hold(line);
      if (take_fault(line)) {
        const std::string body =
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InternalError</Code>"
            "<Message>injected by the test</Message></Error>";
        const std::string answer =
            "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\n"
            "Content-Length: " +
            std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
        send_all(client, answer.data(), answer.size());
      } else {
        relay(client, request, line, header(head, "range"));
      }
    }
    ::close(client);
  }

  // Sends the request to the server, records the exchange once the server closed, then sends the
  // answer back: a client that has its answer finds the exchange recorded.
  void relay(int client, const std::string& request, const std::string& line, const std::string& range) {
    const int server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(server_port_));
    if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        !send_all(server, request.data(), request.size())) {
      if (server >= 0) ::close(server);
      return;  // the client sees its connection closed: no answer
    }
    std::string answer;
    char buf[65536];
    for (ssize_t k; (k = ::recv(server, buf, sizeof buf, 0)) > 0;)
      answer.append(buf, static_cast<std::size_t>(k));
    ::close(server);
    exchange e;
    e.request_line = line;
    e.range = range;
    const auto head_end = answer.find("\r\n\r\n");
    if (answer.size() > 12) e.status = std::atoi(answer.c_str() + 9);
    if (head_end != std::string::npos) e.body_bytes = answer.size() - head_end - 4;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      exchanges_.push_back(std::move(e));
    }
    send_all(client, answer.data(), answer.size());
  }

  int server_port_;
  int port_ = 0;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mutex_;
  std::vector<std::thread> connections_;
  std::vector<exchange> exchanges_;
  std::condition_variable together_;  // hold_until_together's
  int hold_count_ = 0;
  std::string hold_text_;
  std::chrono::seconds hold_limit_{0};
  int held_ = 0;  // requests held now
  bool held_together_ = false;
  int fail_count_ = 0;
  std::string fail_text_;
  std::atomic<int> failures_served_{0};
};

}  // namespace cohort::test

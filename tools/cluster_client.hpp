// The blocking client `submit` uses to talk to a cluster-head over the CURVE wire: connect with
// the cluster's credentials, send one request, wait for its reply (or a request_failed), and
// receive the events of a followed job.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include <caf/message.hpp>

#include "net/wire_client.hpp"

namespace cohort::tools {

// What went wrong talking to the head: cannot connect, refused, no reply, or the head's answer.
class client_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class cluster_client {
 public:
  // Connects to `address` ("host:port") with the credentials file; throws client_error when the
  // head refuses the credentials or does not answer within connect_timeout.
  cluster_client(const std::string& address, const std::string& credentials_file,
                 std::chrono::milliseconds connect_timeout = std::chrono::seconds(10));
  ~cluster_client();

  // Sends `request` and returns the first reply of type Reply, passing over events of a followed
  // job that arrive meanwhile; a request_failed from the head becomes client_error.
  template <class Reply, class Request>
  Reply ask(const Request& request, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    client_->send(request);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      auto msg = left.count() > 0 ? next(left) : std::nullopt;
      if (!msg) throw client_error("the head did not answer within " + seconds(timeout));
      if (is_event(*msg)) continue;
      return unpack<Reply>(*msg);
    }
  }
  // How many times the link to the head was (re)established; grows when the head came back.
  std::uint64_t connections() const { return client_->status().handshakes; }
  // The next message from the head, or nullopt after the timeout.
  std::optional<caf::message> next(std::chrono::milliseconds timeout);
  template <class Reply>
  static Reply unpack(const caf::message& msg);

 private:
  static std::string seconds(std::chrono::milliseconds d);
  static bool is_event(const caf::message& msg);
  [[noreturn]] static void fail_with(const caf::message& msg);

  std::unique_ptr<net::wire_client> client_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<caf::message> inbox_;
};

template <class Reply>
Reply cluster_client::unpack(const caf::message& msg) {
  if (msg.match_element<Reply>(0)) return msg.get_as<Reply>(0);
  fail_with(msg);
}

}  // namespace cohort::tools

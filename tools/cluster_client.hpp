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

  // Sends `request` and returns the first reply of type Reply; a request_failed from the head
  // becomes client_error with its message.
  template <class Reply, class Request>
  Reply ask(const Request& request, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    client_->send(request);
    auto msg = next(timeout);
    if (!msg) throw client_error("the head did not answer within " + seconds(timeout));
    return unpack<Reply>(*msg);
  }
  // The next message from the head, or nullopt after the timeout.
  std::optional<caf::message> next(std::chrono::milliseconds timeout);
  template <class Reply>
  static Reply unpack(const caf::message& msg);

 private:
  static std::string seconds(std::chrono::milliseconds d);
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

// Blocking wire client for `submit` (see cluster_client.hpp).
#include "tools/cluster_client.hpp"

#include "actors/messages.hpp"
#include "actors/wire_protocol.hpp"
#include "net/bridge_messages.hpp"
#include "net/credentials.hpp"

namespace cohort::tools {

cluster_client::cluster_client(const std::string& address, const std::string& credentials_file,
                               std::chrono::milliseconds connect_timeout) {
  auto creds = net::load_credentials(credentials_file);
  auto options = net::client_options::from(creds, address);
  client_ = std::make_unique<net::wire_client>(actors::make_wire_codec(), options,
                                               [this](caf::message msg) {
                                                 std::lock_guard<std::mutex> lock(mutex_);
                                                 inbox_.push_back(std::move(msg));
                                                 arrived_.notify_all();
                                               });
  client_->start();
  auto state = client_->wait_for_link(connect_timeout);
  switch (state) {
    case net::link_state::connected:
      return;
    case net::link_state::refused:
      throw client_error("the head at " + address + " refused these credentials (" +
                         credentials_file + " belongs to another cluster, or is stale)");
    case net::link_state::handshake_failed:
      throw client_error("the CURVE handshake with " + address + " failed: " + credentials_file +
                         " does not match this head's keys");
    case net::link_state::connecting:
      break;
  }
  throw client_error("no answer from a head at " + address + " within " +
                     seconds(connect_timeout) + " (is cluster-head running there?)");
}

cluster_client::~cluster_client() { client_->stop(); }

std::optional<caf::message> cluster_client::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!arrived_.wait_for(lock, timeout, [this] { return !inbox_.empty(); })) return std::nullopt;
  auto msg = std::move(inbox_.front());
  inbox_.pop_front();
  return msg;
}

std::string cluster_client::seconds(std::chrono::milliseconds d) {
  return std::to_string(d.count() / 1000) + " s";
}

bool cluster_client::is_event(const caf::message& msg) {
  return msg.match_element<actors::job_event>(0);
}

void cluster_client::fail_with(const caf::message& msg) {
  if (msg.match_element<net::request_failed>(0))
    throw client_error(msg.get_as<net::request_failed>(0).message);
  throw client_error("unexpected reply from the head: " + to_string(msg));
}

}  // namespace cohort::tools

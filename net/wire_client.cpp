// The node's / client's side of the wire (see wire_client.hpp).
#include "net/wire_client.hpp"

#include "net/credentials.hpp"
#include "net/net_error.hpp"

namespace cohort::net {

std::string tcp_endpoint(const std::string& address) {
  std::string rest = address.rfind("tcp://", 0) == 0 ? address.substr(6) : address;
  auto colon = rest.rfind(':');
  bool ok = colon != std::string::npos && colon > 0 && colon + 1 < rest.size();
  int port = 0;
  if (ok) {
    try {
      std::size_t used = 0;
      port = std::stoi(rest.substr(colon + 1), &used);
      ok = used == rest.size() - colon - 1 && port > 0 && port < 65536;
    } catch (const std::exception&) {
      ok = false;
    }
  }
  if (!ok)
    throw net_error("bad head address '" + address + "': expected HOST:PORT, e.g. 127.0.0.1:6380");
  return "tcp://" + rest;
}

client_options client_options::from(const cluster_credentials& creds, const std::string& address) {
  client_options o;
  o.address = address.empty() ? creds.server_address : address;
  o.server_public_key = creds.server_public_key;
  o.client_keys = creds.client;
  return o;
}

const char* to_string(link_state s) {
  switch (s) {
    case link_state::connecting: return "connecting";
    case link_state::connected: return "connected";
    case link_state::refused: return "refused";
    case link_state::handshake_failed: return "handshake_failed";
  }
  return "invalid link_state";
}

wire_client::wire_client(std::shared_ptr<const wire_codec> codec, client_options options,
                         handler on_message, link_handler on_link)
  : codec_(std::move(codec)),
    options_(std::move(options)),
    on_message_(std::move(on_message)),
    on_link_(std::move(on_link)) {
  if (!codec_ || !on_message_)
    throw std::invalid_argument("wire_client needs a codec and a message handler");
}

wire_client::~wire_client() {
  stop();
}

void wire_client::start() {
  if (thread_.joinable())
    throw net_error("the wire client is already started");
  if (options_.address.empty())
    throw net_error("no head address: pass --address HOST:PORT (or set COHORT_ADDRESS)");
  const std::string endpoint = tcp_endpoint(options_.address);
  socket_ = zmq::socket_t{ctx_, zmq::socket_type::dealer};
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::sndhwm, options_.send_hwm);
  socket_.set(zmq::sockopt::rcvhwm, options_.receive_hwm);
  socket_.set(zmq::sockopt::immediate, options_.queue_while_disconnected ? 0 : 1);
  socket_.set(zmq::sockopt::maxmsgsize,
              static_cast<std::int64_t>(codec_->limits().max_frame_bytes) * 2);
  socket_.set(zmq::sockopt::reconnect_ivl, static_cast<int>(options_.reconnect_interval.count()));
  socket_.set(zmq::sockopt::reconnect_ivl_max,
              static_cast<int>(options_.reconnect_interval_max.count()));
  if (options_.heartbeat_interval.count() > 0) {
    socket_.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(options_.heartbeat_interval.count()));
    socket_.set(zmq::sockopt::heartbeat_timeout,
                static_cast<int>(options_.heartbeat_timeout.count()));
  }
  configure_curve_client(socket_, options_.server_public_key, options_.client_keys);
  monitor_ = detail::open_monitor(
    ctx_, socket_,
    ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED
      | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
      | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
  try {
    socket_.connect(endpoint);
  } catch (const zmq::error_t& e) {
    monitor_.close();
    socket_.close();
    throw net_error("cannot connect to " + endpoint + ": " + e.what());
  }
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

void wire_client::stop() {
  if (!thread_.joinable())
    return;
  stop_ = true;
  wake_.notify();
  thread_.join();
}

link_state wire_client::wait_for_link(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock{link_mutex_};
  link_changed_.wait_for(lock, timeout, [this] { return link_.state != link_state::connecting; });
  return link_.state;
}

link_status wire_client::wait_for_connection(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock{link_mutex_};
  link_changed_.wait_for(lock, timeout, [this] {
    return link_.state == link_state::connected || link_.state == link_state::refused;
  });
  return link_;
}

link_status wire_client::status() const {
  std::lock_guard<std::mutex> lock{link_mutex_};
  return link_;
}

void wire_client::send_frame(std::string frame) {
  outbox_.push({{}, std::move(frame)});
}

void wire_client::on_monitor_event(std::uint16_t event) {
  link_state next;
  {
    std::lock_guard<std::mutex> lock{link_mutex_};
    switch (event) {
      case ZMQ_EVENT_CONNECTED:
        handshake_on_connection_ = false;
        return;
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        handshake_on_connection_ = true;
        ++link_.handshakes;
        link_.state = link_state::connected;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        ++link_.refusals;
        link_.state = link_state::refused;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        ++link_.failed_handshakes;
        link_.state = link_state::handshake_failed;
        counters_.count_handshake_failure();
        break;
      case ZMQ_EVENT_DISCONNECTED:
        ++link_.disconnects;
        if (handshake_on_connection_) {
          link_.state = link_state::connecting;
        } else if (link_.state == link_state::connecting) {
          ++link_.failed_handshakes; // closed by the head before the handshake completed
          link_.state = link_state::handshake_failed;
        }
        handshake_on_connection_ = false;
        break;
      default:
        return;
    }
    next = link_.state;
  }
  link_changed_.notify_all();
  if (on_link_) {
    try {
      on_link_(next);
    } catch (...) {
      counters_.count_handler_error();
    }
  }
}

void wire_client::receive_ready() {
  for (int n = 0; n < 256; ++n) {
    zmq::message_t frame;
    if (!socket_.recv(frame, zmq::recv_flags::dontwait))
      return;
    bool multipart = false;
    while (frame.more()) {
      zmq::message_t extra;
      if (!socket_.recv(extra))
        break;
      multipart = true;
      if (!extra.more())
        break;
    }
    if (multipart) {
      counters_.count_refused(frame_error::multipart);
      continue;
    }
    decoded_frame d = codec_->decode(frame.data(), frame.size());
    if (!d.ok()) {
      counters_.count_refused(d.error); // the head is not told: it sent garbage
      continue;
    }
    counters_.count_accepted();
    try {
      on_message_(std::move(d.message));
    } catch (...) {
      counters_.count_handler_error();
    }
  }
}

void wire_client::run() {
  std::vector<zmq::pollitem_t> items{{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                     {monitor_.handle(), 0, ZMQ_POLLIN, 0},
                                     {nullptr, wake_.fd(), ZMQ_POLLIN, 0}};
  try {
    while (!stop_) {
      zmq::poll(items, std::chrono::milliseconds{-1});
      if (items[2].revents & ZMQ_POLLIN)
        wake_.drain();
      for (auto& item : outbox_.take()) {
        if (!socket_.send(zmq::buffer(item.frame), zmq::send_flags::dontwait))
          counters_.count_send_dropped();
      }
      if (items[1].revents & ZMQ_POLLIN)
        while (auto ev = detail::read_monitor_event(monitor_))
          on_monitor_event(ev->event);
      if (items[0].revents & ZMQ_POLLIN)
        receive_ready();
    }
  } catch (const zmq::error_t&) {
    // a broken socket ends the loop
  }
  monitor_.close();
  socket_.close();
}

} // namespace cohort::net

// The head's side of the wire (see wire_server.hpp).
#include "net/wire_server.hpp"

#include "net/credentials.hpp"
#include "net/net_error.hpp"

namespace cohort::net {

server_options server_options::from(const cluster_secrets& secrets) {
  server_options o;
  o.server_keys = secrets.server;
  o.allowed_client_keys = {secrets.credentials.client.public_key};
  return o;
}

wire_server::wire_server(std::shared_ptr<const wire_codec> codec, server_options options,
                         handler on_message)
  : codec_(std::move(codec)),
    options_(std::move(options)),
    on_message_(std::move(on_message)),
    zap_(ctx_, options_.allowed_client_keys) {
  if (!codec_ || !on_message_)
    throw std::invalid_argument("wire_server needs a codec and a message handler");
}

wire_server::~wire_server() {
  stop();
}

std::string wire_server::endpoint() const {
  return "tcp://" + options_.bind_address + ":" + std::to_string(port_);
}

void wire_server::start() {
  if (thread_.joinable())
    throw net_error("the wire server is already started");
  // Fail closed: the ZAP handler runs before the socket can accept anyone, and if it ever
  // stops, the loop closes the socket.
  zap_.start([this] {
    zap_died_ = true;
    wake_.notify();
  });
  try {
    socket_ = zmq::socket_t{ctx_, zmq::socket_type::router};
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndhwm, options_.send_hwm);
    socket_.set(zmq::sockopt::rcvhwm, options_.receive_hwm);
    socket_.set(zmq::sockopt::router_mandatory, 1);
    // Twice the decoder's limit: frames in between are refused with an answer; beyond it
    // libzmq drops the connection before buffering the frame.
    socket_.set(zmq::sockopt::maxmsgsize,
                static_cast<std::int64_t>(codec_->limits().max_frame_bytes) * 2);
    if (options_.heartbeat_interval.count() > 0) {
      socket_.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(options_.heartbeat_interval.count()));
      socket_.set(zmq::sockopt::heartbeat_timeout,
                  static_cast<int>(options_.heartbeat_timeout.count()));
    }
    configure_curve_server(socket_, options_.server_keys);
    monitor_ = detail::open_monitor(ctx_, socket_,
                                    ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                      | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                                      | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    const std::string where = "tcp://" + options_.bind_address + ":"
                              + (options_.port ? std::to_string(options_.port) : std::string{"*"});
    try {
      socket_.bind(where);
    } catch (const zmq::error_t& e) {
      throw net_error("cannot bind " + where + ": " + e.what()
                      + " (is another cluster-head using the port? choose another with --port)");
    }
    std::string last = socket_.get(zmq::sockopt::last_endpoint);
    port_ = static_cast<std::uint16_t>(std::stoi(last.substr(last.rfind(':') + 1)));
  } catch (...) {
    monitor_.close();
    socket_.close();
    zap_.stop();
    throw;
  }
  stop_ = false;
  serving_ = true;
  thread_ = std::thread([this] { run(); });
}

void wire_server::stop() {
  if (thread_.joinable()) {
    stop_ = true;
    wake_.notify();
    thread_.join();
  }
  zap_.stop();
}

void wire_server::send_frame(const std::string& routing_id, std::string frame) {
  outbox_.push({routing_id, std::move(frame)});
}

void wire_server::send_now(const std::string& routing_id, const std::string& frame) {
  try {
    if (!socket_.send(zmq::buffer(routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      counters_.count_send_dropped();
      return;
    }
    socket_.send(zmq::buffer(frame), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH)
      counters_.count_send_unroutable();
    else
      counters_.count_send_dropped();
  }
}

void wire_server::refuse(const std::string& routing_id, frame_error reason,
                         std::uint32_t type_id, const std::string& detail) {
  counters_.count_refused(reason);
  wire_error reply{reason, type_id, detail.substr(0, 200)};
  try {
    send_now(routing_id, codec_->encode(reply));
  } catch (const encode_error&) {
    counters_.count_send_dropped(); // limits too tight for the reply itself
  }
}

void wire_server::receive_ready() {
  // A bounded batch per wake-up, so outgoing frames and stop requests are not starved.
  for (int n = 0; n < 256; ++n) {
    zmq::message_t id;
    if (!socket_.recv(id, zmq::recv_flags::dontwait))
      return;
    zmq::message_t frame;
    if (!id.more() || !socket_.recv(frame))
      continue;
    bool multipart = false;
    while (frame.more()) { // keep only the first content frame in memory
      zmq::message_t extra;
      if (!socket_.recv(extra))
        break;
      multipart = true;
      if (!extra.more())
        break;
    }
    peer from{id.to_string(), {}};
    if (const char* key = zmq_msg_gets(frame.handle(), "User-Id"))
      from.client_key = key;
    if (multipart) {
      refuse(from.routing_id, frame_error::multipart, 0, "one frame per message");
      continue;
    }
    decoded_frame d = codec_->decode(frame.data(), frame.size());
    if (!d.ok()) {
      refuse(from.routing_id, d.error, d.type_id.value_or(0), d.detail);
      continue;
    }
    counters_.count_accepted();
    try {
      on_message_(from, std::move(d.message));
    } catch (...) {
      counters_.count_handler_error();
    }
  }
}

void wire_server::run() {
  std::vector<zmq::pollitem_t> items{{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                     {monitor_.handle(), 0, ZMQ_POLLIN, 0},
                                     {nullptr, wake_.fd(), ZMQ_POLLIN, 0}};
  try {
    while (!stop_ && !zap_died_) {
      zmq::poll(items, std::chrono::milliseconds{-1});
      if (items[2].revents & ZMQ_POLLIN)
        wake_.drain();
      if (zap_died_)
        break;
      for (auto& item : outbox_.take())
        send_now(item.routing_id, item.frame);
      if (items[1].revents & ZMQ_POLLIN)
        while (detail::read_monitor_event(monitor_))
          counters_.count_handshake_failure();
      if (items[0].revents & ZMQ_POLLIN)
        receive_ready();
    }
  } catch (const zmq::error_t&) {
    // a broken socket ends the loop; serving() tells
  }
  serving_ = false;
  monitor_.close();
  socket_.close();
}

} // namespace cohort::net

// The ZAP handler of one ZeroMQ context (see zap_handler.hpp).
#include "net/zap_handler.hpp"

#include <sodium.h>

#include "net/curve.hpp"
#include "net/net_error.hpp"

namespace cohort::net {

namespace {

constexpr const char* zap_endpoint = "inproc://zeromq.zap.01";

bool equals(const zmq::message_t& msg, const char* text) {
  return msg.to_string_view() == text;
}

} // namespace

zap_handler::zap_handler(zmq::context_t& ctx, const std::vector<std::string>& allowed_client_keys)
  : ctx_(ctx) {
  for (std::size_t i = 0; i < allowed_client_keys.size(); ++i)
    allowed_.push_back(
      decode_z85_key(allowed_client_keys[i], "allowed client key " + std::to_string(i)));
}

zap_handler::~zap_handler() {
  stop();
}

void zap_handler::start(std::function<void()> on_exit) {
  if (thread_.joinable())
    throw net_error("the ZAP handler is already started");
  zmq::socket_t socket{ctx_, zmq::socket_type::rep};
  socket.set(zmq::sockopt::linger, 0);
  try {
    socket.bind(zap_endpoint);
  } catch (const zmq::error_t& e) {
    throw net_error(std::string{"cannot bind the ZAP handler at "} + zap_endpoint + ": "
                    + e.what() + " (one ZAP handler per ZeroMQ context)");
  }
  on_exit_ = std::move(on_exit);
  stop_ = false;
  running_ = true;
  thread_ = std::thread([this, s = std::move(socket)]() mutable { run(std::move(s)); });
}

void zap_handler::stop() {
  if (!thread_.joinable())
    return;
  stop_ = true;
  wake_.notify();
  thread_.join();
}

bool zap_handler::admits(const zmq::message_t& domain, const zmq::message_t& mechanism,
                         const zmq::message_t& key) const {
  if (!equals(domain, zap_domain) || !equals(mechanism, "CURVE") || key.size() != 32)
    return false;
  bool found = false;
  for (const auto& allowed : allowed_) // constant time per key, no early exit
    found |= sodium_memcmp(allowed.data(), key.data(), 32) == 0;
  return found;
}

void zap_handler::run(zmq::socket_t socket) {
  bool failed = false;
  try {
    std::vector<zmq::pollitem_t> items{{socket.handle(), 0, ZMQ_POLLIN, 0},
                                       {nullptr, wake_.fd(), ZMQ_POLLIN, 0}};
    while (!stop_) {
      zmq::poll(items, std::chrono::milliseconds{-1});
      if (items[1].revents & ZMQ_POLLIN)
        wake_.drain();
      if (!(items[0].revents & ZMQ_POLLIN))
        continue;
      // ZAP 1.0 request: version, request id, domain, address, routing id, mechanism, credentials
      std::vector<zmq::message_t> request;
      zmq::recv_result_t got;
      do {
        zmq::message_t part;
        got = socket.recv(part, zmq::recv_flags::none);
        request.push_back(std::move(part));
      } while (got && request.back().more() && request.size() < 16);
      while (request.back().more()) { // drain an oversized request
        zmq::message_t extra;
        if (!socket.recv(extra))
          break;
        request.back() = std::move(extra);
      }
      bool ok = request.size() >= 7 && equals(request[0], "1.0")
                && admits(request[2], request[5], request[6]);
      std::string request_id = request.size() > 1 ? request[1].to_string() : std::string{};
      std::string user_id = ok ? encode_z85_key(request[6].data<std::uint8_t>()) : std::string{};
      (ok ? accepted_ : denied_).fetch_add(1);
      socket.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
      socket.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
      socket.send(ok ? zmq::str_buffer("200") : zmq::str_buffer("400"), zmq::send_flags::sndmore);
      socket.send(ok ? zmq::str_buffer("OK") : zmq::str_buffer("client key not allowed"),
                  zmq::send_flags::sndmore);
      socket.send(zmq::buffer(user_id), zmq::send_flags::sndmore);
      socket.send(zmq::str_buffer(""), zmq::send_flags::none);
    }
  } catch (const std::exception&) {
    failed = true;
  }
  socket.close();
  running_ = false;
  if (failed && on_exit_)
    on_exit_();
}

} // namespace cohort::net

// A standby head's not_leader answers (see standby_responder.hpp).
#include "tools/standby_responder.hpp"

#include "actors/leader_session.hpp"
#include "actors/wire_protocol.hpp"

namespace cohort::tools {

void standby_responder::update(const std::optional<core::store::lease_record>& leader) {
  auto answer = actors::standby_answer(leader, core::store::system_clock_ms());
  std::lock_guard<std::mutex> lock(mutex_);
  answer_ = std::move(answer);
}

void standby_responder::start(const std::optional<core::store::lease_record>& leader) {
  update(leader);
  server_ = std::make_unique<net::wire_server>(
      actors::make_wire_codec(), options_, [this](const net::peer& from, caf::message msg) {
        // Heartbeats need no answer: the hello before them got one.
        if (msg.match_element<net::heartbeat>(0)) return;
        net::not_leader answer;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          answer = answer_;
        }
        server_->send(from.routing_id, answer);
      });
  try {
    server_->start();
  } catch (...) {
    server_.reset();
    throw;
  }
}

void standby_responder::stop() {
  if (!server_) return;
  server_->stop();
  server_.reset();
}

}  // namespace cohort::tools

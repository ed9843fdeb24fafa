// The head's Prometheus endpoint over cpp-httplib (see metrics_server.hpp).
#include "tools/metrics_server.hpp"

#include <httplib.h>

#include <caf/all.hpp>

#include <chrono>
#include <stdexcept>

#include "actors/head_metrics.hpp"

namespace cohort::tools {

metrics_server::metrics_server(caf::actor_system& sys, caf::actor head, const std::string& bind_address,
                               std::uint16_t port, std::string token)
    : server_(std::make_unique<httplib::Server>()) {
  server_->Get("/metrics", [&sys, head, token](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") != "Bearer " + token) {
      res.status = 401;
      res.set_content("missing or wrong bearer token; `submit metrics-token` prints the cluster's\n",
                      "text/plain");
      return;
    }
    caf::scoped_actor self{sys};
    self->request(head, std::chrono::seconds(10), actors::metrics_query{})
        .receive(
            [&](const actors::metrics_snapshot& snapshot) {
              res.set_content(actors::prometheus_text(snapshot), "text/plain; version=0.0.4");
            },
            [&](const caf::error& err) {
              res.status = 503;
              res.set_content("the head did not answer: " + sys.render(err) + "\n", "text/plain");
            });
  });
  const int bound = port == 0 ? server_->bind_to_any_port(bind_address)
                              : (server_->bind_to_port(bind_address, port) ? port : -1);
  if (bound <= 0)
    throw std::runtime_error("cannot serve metrics on " + bind_address + ":" + std::to_string(port) +
                             " (--metrics-port, --metrics-bind)");
  port_ = static_cast<std::uint16_t>(bound);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

metrics_server::~metrics_server() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace cohort::tools

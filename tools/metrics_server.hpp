// The head's metrics endpoint: GET /metrics in Prometheus' text format over plain HTTP (bind it to
// a private interface; the default is 127.0.0.1), answered by asking the head actor for a
// snapshot (actors/head_metrics.hpp). Every request must carry `Authorization: Bearer TOKEN`
// (net::metrics_token of the cluster's credentials); others get 401. Read-only: nothing here
// changes the cluster. One listening thread (cpp-httplib's pool answers the requests).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace cohort::tools {

class metrics_server {
 public:
  // Binds bind_address:port (0: any free port) at once; throws std::runtime_error naming the
  // address when it cannot. `head` answers actors::metrics_query.
  metrics_server(caf::actor_system& sys, caf::actor head, const std::string& bind_address,
                 std::uint16_t port, std::string token);
  // Stops listening and waits for the thread.
  ~metrics_server();
  metrics_server(const metrics_server&) = delete;
  metrics_server& operator=(const metrics_server&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace cohort::tools

// The head's web endpoint, off unless `cluster-head --dashboard-port` names a port: a read-only
// dashboard page (GET /: nodes with their resources and drain state, jobs with state, attempts
// and failures, and for the chosen job live charts of loss, learning rate, tokens/s and MFU per
// logged step, of each rank's host (and GPU) memory over time from the run's memory CSVs, and its
// log tail), the JSON the page reads (GET /api/cluster, /api/jobs/ID/history,
// /api/jobs/ID/memory, /api/jobs/ID/logs) and Prometheus' text format (GET /metrics). HTTPS when
// given a certificate and its key (PEM files: `cluster-head --dashboard-cert/--dashboard-key`),
// else plain HTTP: then bind it to a private interface (the default is 127.0.0.1). Everything but the page
// itself (which holds no data) needs `Authorization: Bearer TOKEN`, net::metrics_token of the cluster's
// credentials (`submit metrics-token` prints it; the page asks for it once and keeps it for the
// browser tab); others get 401. Nothing here changes the cluster. Requests are answered on
// cpp-httplib's thread pool by asking the head actor (actors/head_metrics.hpp, logs_query,
// job_query) and, for memory, reading the run directory there.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace cohort::tools {

// The dashboard page: one HTML document with its script and styles, no outside assets.
const char* dashboard_page();

// The certificate (chain) and private key the dashboard serves HTTPS with, as PEM files.
struct dashboard_tls {
  std::string cert_file;
  std::string key_file;
};

// Why `tls` cannot serve HTTPS (the files are not a PEM certificate and the private key that
// matches it, or cannot be read), naming both; nullopt when it can.
std::optional<std::string> dashboard_tls_problem(const dashboard_tls& tls);

class dashboard_server {
 public:
  // Binds bind_address:port (0: any free port) at once, serving HTTPS with `tls` when given;
  // throws std::runtime_error naming the address when it cannot bind, or the files when they are
  // not a certificate and its key. `head` answers metrics_query, job_history_query, job_query and
  // logs_query.
  dashboard_server(caf::actor_system& sys, caf::actor head, const std::string& bind_address,
                   std::uint16_t port, std::string token,
                   const std::optional<dashboard_tls>& tls = std::nullopt);
  // Stops listening and waits for the thread.
  ~dashboard_server();
  dashboard_server(const dashboard_server&) = delete;
  dashboard_server& operator=(const dashboard_server&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace cohort::tools

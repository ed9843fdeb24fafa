// The head's dashboard, its JSON and the Prometheus endpoint over cpp-httplib (see
// dashboard_server.hpp).
#include "tools/dashboard_server.hpp"

#include <httplib.h>

#include <caf/all.hpp>

#include <chrono>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "actors/head_metrics.hpp"
#include "net/json_inspector.hpp"

namespace cohort::tools {
namespace {

constexpr auto head_timeout = std::chrono::seconds(10);
constexpr std::size_t log_tail_lines = 200;

// Asks the head and hands the reply to `ok`; a head that does not answer makes a 503 (an unknown
// job a 404).
template <class Reply, class Request, class Ok>
void ask_head(caf::actor_system& sys, const caf::actor& head, Request request, httplib::Response& res, Ok ok) {
  caf::scoped_actor self{sys};
  self->request(head, head_timeout, std::move(request))
      .receive([&](Reply& reply) { ok(reply); },
               [&](const caf::error& err) {
                 const auto why = sys.render(err);
                 res.status = why.find("no job with id") != std::string::npos ? 404 : 503;
                 res.set_content(nlohmann::json{{"error", why}}.dump(), "application/json");
               });
}

nlohmann::json job_json(const actors::job_record& r) {
  auto j = net::to_json_view(r);
  j.erase("spec_json");  // the page shows the run, not the spec
  return j;
}

}  // namespace

dashboard_server::dashboard_server(caf::actor_system& sys, caf::actor head, const std::string& bind_address,
                                   std::uint16_t port, std::string token)
    : server_(std::make_unique<httplib::Server>()) {
  const auto allowed = [token](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") == "Bearer " + token) return true;
    res.status = 401;
    res.set_content("missing or wrong bearer token; `submit metrics-token` prints the cluster's\n", "text/plain");
    return false;
  };
  server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(dashboard_page(), "text/html; charset=utf-8");
  });
  server_->Get("/metrics", [&sys, head, allowed](const httplib::Request& req, httplib::Response& res) {
    if (!allowed(req, res)) return;
    ask_head<actors::metrics_snapshot>(sys, head, actors::metrics_query{}, res, [&](const actors::metrics_snapshot& s) {
      res.set_content(actors::prometheus_text(s), "text/plain; version=0.0.4");
    });
  });
  server_->Get("/api/cluster", [&sys, head, allowed](const httplib::Request& req, httplib::Response& res) {
    if (!allowed(req, res)) return;
    ask_head<actors::metrics_snapshot>(sys, head, actors::metrics_query{}, res, [&](const actors::metrics_snapshot& s) {
      nlohmann::json out{{"epoch", s.epoch}, {"nodes", nlohmann::json::array()}, {"jobs", nlohmann::json::array()}};
      for (const auto& n : s.list.nodes) out["nodes"].push_back(net::to_json_view(n));
      for (const auto& j : s.list.jobs) out["jobs"].push_back(job_json(j));
      res.set_content(out.dump(), "application/json");
    });
  });
  server_->Get(R"(/api/jobs/([A-Za-z0-9_.-]+)/history)",
               [&sys, head, allowed](const httplib::Request& req, httplib::Response& res) {
                 if (!allowed(req, res)) return;
                 const std::string id = req.matches[1];
                 ask_head<actors::job_history>(sys, head, actors::job_history_query{id}, res, [&](const actors::job_history& h) {
                   nlohmann::json points = nlohmann::json::array();
                   for (const auto& p : h.points)
                     points.push_back({{"step", p.step}, {"loss", p.loss}, {"lr", p.lr}, {"grad_norm", p.grad_norm},
                                       {"tokens_per_s", p.tokens_per_s}, {"mfu", p.mfu}});
                   res.set_content(nlohmann::json{{"job", id}, {"points", points}}.dump(), "application/json");
                 });
               });
  server_->Get(R"(/api/jobs/([A-Za-z0-9_.-]+)/logs)",
               [&sys, head, allowed](const httplib::Request& req, httplib::Response& res) {
                 if (!allowed(req, res)) return;
                 const std::string id = req.matches[1];
                 ask_head<actors::job_logs>(sys, head, actors::logs_query{id}, res, [&](const actors::job_logs& logs) {
                   nlohmann::json lines = nlohmann::json::array();
                   const auto first = logs.lines.size() > log_tail_lines ? logs.lines.size() - log_tail_lines : 0;
                   for (auto i = first; i < logs.lines.size(); ++i) {
                     const auto& l = logs.lines[i];
                     lines.push_back("(rank " + std::to_string(l.rank) + " on " + l.node + ") " + l.text);
                   }
                   res.set_content(nlohmann::json{{"job", id}, {"lines", lines}}.dump(), "application/json");
                 });
               });
  const int bound = port == 0 ? server_->bind_to_any_port(bind_address)
                              : (server_->bind_to_port(bind_address, port) ? port : -1);
  if (bound <= 0)
    throw std::runtime_error("cannot serve the dashboard on " + bind_address + ":" + std::to_string(port) +
                             " (--dashboard-port, --dashboard-bind)");
  port_ = static_cast<std::uint16_t>(bound);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

dashboard_server::~dashboard_server() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace cohort::tools

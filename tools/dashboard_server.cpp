// The head's dashboard, its JSON and the Prometheus endpoint over cpp-httplib (see
// dashboard_server.hpp).
#include "tools/dashboard_server.hpp"

#include <httplib.h>

#include <caf/all.hpp>

#include <chrono>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "actors/head_metrics.hpp"
#include "core/train/memory_report.hpp"
#include "net/json_inspector.hpp"

namespace cohort::tools {
namespace {

constexpr auto head_timeout = std::chrono::seconds(10);
constexpr std::size_t log_tail_lines = 200;
// The most memory samples a rank's chart gets: past it, evenly spaced rows (the last included).
constexpr std::size_t max_memory_points = 1000;

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

// A job's memory CSVs (run.memory_status_every_s), read from its run directory
// (<run.storage_path>/<name>, where the head sees the shared storage): per rank, its samples'
// wall time, step, host RSS and GPU bytes allocated (null on a CPU rank). No ranks when the run
// logs no memory; a file that cannot be read or parsed gives "error" beside what could be read.
nlohmann::json memory_json(const actors::job_record& r) {
  nlohmann::json out{{"job", r.id}, {"ranks", nlohmann::json::array()}};
  const auto spec = nlohmann::json::parse(r.spec_json, nullptr, false);
  if (!spec.is_object() || !spec.contains("run") || !spec["run"].contains("storage_path") || !spec.contains("name"))
    return out;
  const std::string run_dir = spec["run"]["storage_path"].get<std::string>() + "/" + spec["name"].get<std::string>();
  if (!std::filesystem::is_directory(run_dir + "/memory")) return out;
  try {
    for (const auto& [rank, samples] : core::train::read_run_memory_samples(run_dir)) {
      nlohmann::json points = nlohmann::json::array();
      const std::size_t stride = (samples.size() + max_memory_points - 1) / max_memory_points;
      for (std::size_t i = 0; i < samples.size(); ++i) {
        if (i % stride != 0 && i + 1 != samples.size()) continue;
        const auto& m = samples[i];
        points.push_back({{"t", m.wall_time},
                          {"step", m.step},
                          {"rss_bytes", m.rss_bytes},
                          {"gpu_allocated_bytes", m.gpu ? nlohmann::json(m.gpu->allocated_bytes) : nlohmann::json()}});
      }
      out["ranks"].push_back({{"rank", rank}, {"points", points}});
    }
  } catch (const core::train::memory_report_error& e) {
    out["error"] = e.what();
  }
  return out;
}

// An HTTPS server with `tls`'s certificate and key, else a plain one.
std::unique_ptr<httplib::Server> make_server(const std::optional<dashboard_tls>& tls) {
  if (!tls) return std::make_unique<httplib::Server>();
  auto server = std::make_unique<httplib::SSLServer>(tls->cert_file.c_str(), tls->key_file.c_str());
  if (!server->is_valid()) throw std::runtime_error(*dashboard_tls_problem(*tls));
  return server;
}

}  // namespace

std::optional<std::string> dashboard_tls_problem(const dashboard_tls& tls) {
  if (httplib::SSLServer(tls.cert_file.c_str(), tls.key_file.c_str()).is_valid()) return std::nullopt;
  return "cannot serve the dashboard over HTTPS with the certificate " + tls.cert_file + " and the key " +
         tls.key_file +
         " (--dashboard-cert, --dashboard-key): give a PEM certificate and the PEM private key "
         "that matches it, both readable";
}

dashboard_server::dashboard_server(caf::actor_system& sys, caf::actor head, const std::string& bind_address,
                                   std::uint16_t port, std::string token,
                                   const std::optional<dashboard_tls>& tls)
    : server_(make_server(tls)) {
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
  server_->Get(R"(/api/jobs/([A-Za-z0-9_.-]+)/memory)",
               [&sys, head, allowed](const httplib::Request& req, httplib::Response& res) {
                 if (!allowed(req, res)) return;
                 ask_head<actors::job_record>(sys, head, actors::job_query{req.matches[1]}, res,
                                              [&](const actors::job_record& r) {
                                                res.set_content(memory_json(r).dump(), "application/json");
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

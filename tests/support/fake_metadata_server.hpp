// A fake cloud instance metadata server on 127.0.0.1 for the preemption-notice tests: it speaks
// the three protocols as their providers document them and refuses what they refuse. AWS IMDSv2:
// PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds (1-21600) gives a token; GET
// /latest/meta-data/spot/instance-action needs a live token in X-aws-ec2-metadata-token (401
// otherwise) and answers 404 until a notice is set, then {"action": ..., "time": ...}. GCP: GET
// /computeMetadata/v1/instance/preempted needs Metadata-Flavor: Google (403 otherwise) and answers
// FALSE or TRUE with that header. Azure: GET /metadata/instance/compute/name and GET/POST
// /metadata/scheduledevents need Metadata: true and an api-version (400 otherwise); the events
// document lists the events set, and a POST's StartRequests are recorded. Every request is
// counted by path, and a test waits on a count with a deadline (no sleeps).
#pragma once

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace cohort::test {

class fake_metadata_server {
 public:
  // On any free port, or on `port` (a server started again where one was).
  explicit fake_metadata_server(int port = 0) {
    routes();
    port_ = port == 0 ? server_.bind_to_any_port("127.0.0.1")
                      : (server_.bind_to_port("127.0.0.1", port) ? port : -1);
    if (port_ <= 0) throw std::runtime_error("fake_metadata_server: cannot listen on 127.0.0.1");
    // Bound: connections wait in the backlog until the loop accepts them.
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // Server::stop() does nothing before the loop runs; a server stopped at once must not hang.
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~fake_metadata_server() {
    server_.stop();
    thread_.join();
  }
  fake_metadata_server(const fake_metadata_server&) = delete;
  fake_metadata_server& operator=(const fake_metadata_server&) = delete;

  int port() const { return port_; }
  std::string origin() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string host_port() const { return "127.0.0.1:" + std::to_string(port_); }

  // AWS: the instance-action from now on (action "terminate", "stop" or "hibernate"; time as
  // "YYYY-MM-DDTHH:MM:SSZ").
  void set_aws_notice(const std::string& action, const std::string& time) {
    set([&] { aws_notice_ = nlohmann::json{{"action", action}, {"time", time}}.dump(); });
  }
  // AWS: the tokens given so far stop working (401), as they do at their TTL.
  void expire_aws_tokens() {
    set([&] { tokens_.clear(); });
  }
  void set_gcp_preempted(bool preempted) {
    set([&] { gcp_preempted_ = preempted; });
  }
  void set_azure_vm_name(const std::string& name) {
    set([&] { vm_name_ = name; });
  }
  // Azure: an event in the document from now on (NotBefore as "Sat, 28 Nov 2026 21:30:00 GMT").
  void add_azure_event(const std::string& id, const std::string& type, const std::vector<std::string>& vms,
                       const std::string& not_before) {
    set([&] {
      events_.push_back({{"EventId", id},
                         {"EventType", type},
                         {"ResourceType", "VirtualMachine"},
                         {"Resources", vms},
                         {"EventStatus", "Scheduled"},
                         {"NotBefore", not_before},
                         {"Description", ""},
                         {"EventSource", "Platform"},
                         {"DurationInSeconds", -1}});
      ++incarnation_;
    });
  }
  // Any answer is this body from now on (a server that is not the metadata server).
  void answer_garbage(const std::string& body) {
    set([&] { garbage_ = body; });
  }

  // Requests by path (every method), and those refused for a missing or wrong header or token.
  int requests(const std::string& path) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = requests_.find(path);
    return it == requests_.end() ? 0 : it->second;
  }
  int refused() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return refused_;
  }
  // The EventIds approved by POSTs (StartRequests), in order.
  std::vector<std::string> azure_acknowledged() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return acknowledged_;
  }
  // Waits until `path` was asked at least `n` times; false after `timeout`.
  bool wait_for_requests(const std::string& path, int n, std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] {
      auto it = requests_.find(path);
      return it != requests_.end() && it->second >= n;
    });
  }
  // Waits until some POST approved an event; false after `timeout`.
  bool wait_for_acknowledgement(std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return !acknowledged_.empty(); });
  }

 private:
  template <class F>
  void set(F f) {
    std::lock_guard<std::mutex> lock(mutex_);
    f();
  }

  // Counts the request; true when the fake answers garbage instead (res is filled).
  bool count(const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++requests_[req.path];
    changed_.notify_all();
    if (garbage_.empty()) return false;
    res.set_content(garbage_, "text/html");
    return true;
  }
  void refuse(httplib::Response& res, int status, const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++refused_;
    res.status = status;
    res.set_content(why, "text/plain");
  }
  static bool azure_headers_ok(const httplib::Request& req) {
    return req.get_header_value("Metadata") == "true" && req.has_param("api-version");
  }

  void routes() {
    server_.Put("/latest/api/token", [this](const httplib::Request& req, httplib::Response& res) {
      if (count(req, res)) return;
      const auto ttl = req.get_header_value("X-aws-ec2-metadata-token-ttl-seconds");
      int seconds = 0;
      try {
        seconds = std::stoi(ttl);
      } catch (const std::exception&) {
      }
      if (seconds < 1 || seconds > 21600) return refuse(res, 400, "missing or invalid TTL header");
      std::lock_guard<std::mutex> lock(mutex_);
      tokens_.push_back("token-" + std::to_string(++tokens_given_));
      res.set_content(tokens_.back(), "text/plain");
    });
    server_.Get("/latest/meta-data/spot/instance-action",
                [this](const httplib::Request& req, httplib::Response& res) {
                  if (count(req, res)) return;
                  const auto token = req.get_header_value("X-aws-ec2-metadata-token");
                  std::unique_lock<std::mutex> lock(mutex_);
                  if (std::find(tokens_.begin(), tokens_.end(), token) == tokens_.end()) {
                    lock.unlock();
                    return refuse(res, 401, "Unauthorized");
                  }
                  if (aws_notice_.empty()) {
                    res.status = 404;
                    res.set_content("Not Found", "text/plain");
                    return;
                  }
                  res.set_content(aws_notice_, "application/json");
                });
    server_.Get("/computeMetadata/v1/instance/preempted",
                [this](const httplib::Request& req, httplib::Response& res) {
                  if (count(req, res)) return;
                  if (req.get_header_value("Metadata-Flavor") != "Google")
                    return refuse(res, 403, "Missing Metadata-Flavor:Google header.");
                  std::lock_guard<std::mutex> lock(mutex_);
                  res.set_header("Metadata-Flavor", "Google");
                  res.set_content(gcp_preempted_ ? "TRUE" : "FALSE", "application/text");
                });
    server_.Get(
        "/metadata/instance/compute/name", [this](const httplib::Request& req, httplib::Response& res) {
          if (count(req, res)) return;
          if (!azure_headers_ok(req) || req.get_param_value("format") != "text")
            return refuse(res, 400, "Bad request: Metadata header, api-version or format=text missing");
          std::lock_guard<std::mutex> lock(mutex_);
          res.set_content(vm_name_, "text/plain");
        });
    server_.Get("/metadata/scheduledevents", [this](const httplib::Request& req, httplib::Response& res) {
      if (count(req, res)) return;
      if (!azure_headers_ok(req))
        return refuse(res, 400, "Bad request: Metadata header or api-version missing");
      std::lock_guard<std::mutex> lock(mutex_);
      res.set_content(nlohmann::json{{"DocumentIncarnation", incarnation_}, {"Events", events_}}.dump(),
                      "application/json");
    });
    server_.Post("/metadata/scheduledevents", [this](const httplib::Request& req, httplib::Response& res) {
      if (count(req, res)) return;
      if (!azure_headers_ok(req))
        return refuse(res, 400, "Bad request: Metadata header or api-version missing");
      const auto body = nlohmann::json::parse(req.body, nullptr, false);
      if (!body.is_object() || !body.contains("StartRequests") || !body["StartRequests"].is_array())
        return refuse(res, 400, "Bad request: no StartRequests");
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& r : body["StartRequests"]) acknowledged_.push_back(r.value("EventId", ""));
      changed_.notify_all();
    });
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::map<std::string, int> requests_;
  int refused_ = 0;
  std::vector<std::string> tokens_;
  int tokens_given_ = 0;
  std::string aws_notice_;
  bool gcp_preempted_ = false;
  std::string vm_name_ = "vm0";
  nlohmann::json events_ = nlohmann::json::array();
  int incarnation_ = 1;
  std::vector<std::string> acknowledged_;
  std::string garbage_;
};

}  // namespace cohort::test

// Preemption notices from the clouds' instance metadata (see preemption_notice.hpp).
#include "core/cloud/preemption_notice.hpp"

#include <httplib.h>

#include <ctime>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace cohort::core::cloud {

namespace {

constexpr const char* aws_notice_path = "/latest/meta-data/spot/instance-action";
constexpr const char* aws_token_path = "/latest/api/token";
constexpr const char* gcp_notice_path = "/computeMetadata/v1/instance/preempted";
constexpr const char* azure_events_path = "/metadata/scheduledevents";
constexpr const char* azure_events_version = "api-version=2020-07-01";
constexpr const char* azure_name_path = "/metadata/instance/compute/name";
constexpr const char* azure_name_query = "api-version=2020-09-01&format=text";
constexpr const char* default_metadata_host = "169.254.169.254";
// IMDSv2 tokens live up to 6 hours; one is fetched again a minute before it ends.
constexpr int aws_token_ttl_s = 21600;

const char* notice_path(notice_provider p) {
  switch (p) {
    case notice_provider::aws:
      return aws_notice_path;
    case notice_provider::gcp:
      return gcp_notice_path;
    case notice_provider::azure:
      return azure_events_path;
  }
  return "";
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "http://HOST[:PORT]" with nothing after it (a trailing '/' dropped); throws naming `what`.
std::string checked_origin(std::string text, const std::string& what) {
  while (!text.empty() && text.back() == '/') text.pop_back();
  const std::string scheme = "http://";
  const auto host = text.rfind(scheme, 0) == 0 ? text.substr(scheme.size()) : "";
  if (host.empty() || host.find_first_of("/?# ") != std::string::npos)
    throw std::invalid_argument(what + ": \"" + text +
                                "\" is not an endpoint; allowed: http://HOST[:PORT] (the metadata "
                                "endpoints speak plain HTTP)");
  return text;
}

std::string format_utc(std::chrono::system_clock::time_point t) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&s, &tm);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return out;
}

std::optional<std::chrono::system_clock::time_point> parse_utc(const std::string& text, const char* format) {
  std::tm tm{};
  const char* end = ::strptime(text.c_str(), format, &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return std::chrono::system_clock::from_time_t(::timegm(&tm));
}

std::unique_ptr<httplib::Client> client_for(const std::string& origin) {
  auto c = std::make_unique<httplib::Client>(origin);
  // The endpoint is on the VM's own link: an answer takes milliseconds; a hung one must not hold
  // the next check past the interval.
  c->set_connection_timeout(2, 0);
  c->set_read_timeout(2, 0);
  c->set_write_timeout(2, 0);
  return c;
}

std::string failed(const std::string& what, const httplib::Result& r) {
  return what + ": no answer (" + httplib::to_string(r.error()) + ")";
}

std::string refused(const std::string& what, const httplib::Result& r) {
  return what + ": HTTP " + std::to_string(r->status) +
         (r->body.empty() ? "" : " (" + r->body.substr(0, 200) + ")");
}

}  // namespace

std::chrono::milliseconds documented_interval(notice_provider p) {
  return p == notice_provider::aws ? std::chrono::milliseconds(5000) : std::chrono::milliseconds(1000);
}

std::string notice_source::describe() const {
  const char* what = provider == notice_provider::aws   ? "AWS spot interruption notices"
                     : provider == notice_provider::gcp ? "GCP preemption notices"
                                                        : "Azure Scheduled Events (Preempt, Terminate)";
  return std::string(what) + " at " + origin + prefix + notice_path(provider) +
         (query.empty() ? "" : "?" + query);
}

std::optional<std::chrono::system_clock::time_point> parse_iso8601_utc(const std::string& text) {
  return parse_utc(text, "%Y-%m-%dT%H:%M:%SZ");
}

std::optional<std::chrono::system_clock::time_point> parse_rfc1123_gmt(const std::string& text) {
  return parse_utc(text, "%a, %d %b %Y %H:%M:%S GMT");
}

notice_source parse_notice_source(const std::string& value, const std::string& option,
                                  const std::function<std::string(const char*)>& env) {
  notice_source s;
  if (value == "aws") {
    s.provider = notice_provider::aws;
    const auto moved = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    s.origin = moved.empty() ? std::string("http://") + default_metadata_host
                             : checked_origin(moved, "AWS_EC2_METADATA_SERVICE_ENDPOINT");
  } else if (value == "gcp") {
    s.provider = notice_provider::gcp;
    const auto moved = env("GCE_METADATA_HOST");
    s.origin = checked_origin("http://" + (moved.empty() ? std::string(default_metadata_host) : moved),
                              "GCE_METADATA_HOST (HOST[:PORT])");
  } else if (value == "azure") {
    s.provider = notice_provider::azure;
    s.origin = std::string("http://") + default_metadata_host;
    s.query = azure_events_version;
  } else {
    const std::string allowed =
        "; allowed: aws, gcp, azure, or the http:// URL of one of their endpoints "
        "(http://HOST[:PORT]/latest/meta-data/spot/instance-action, "
        "http://HOST[:PORT]/computeMetadata/v1/instance/preempted, "
        "http://HOST[:PORT]/metadata/scheduledevents[?api-version=...])";
    if (value.rfind("http://", 0) != 0)
      throw std::invalid_argument(option + " \"" + value + "\": not a provider nor an http:// URL" + allowed);
    const auto path_at = value.find('/', 7);
    const auto origin = value.substr(0, path_at);
    std::string path = path_at == std::string::npos ? "" : value.substr(path_at);
    const auto q = path.find('?');
    const std::string query = q == std::string::npos ? "" : path.substr(q + 1);
    path = path.substr(0, q);
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    try {
      s.origin = checked_origin(origin, option);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(option + " \"" + value + "\": no host in the URL" + allowed);
    }
    bool known = false;
    for (const auto p : {notice_provider::aws, notice_provider::gcp, notice_provider::azure}) {
      if (!ends_with(path, notice_path(p))) continue;
      s.provider = p;
      s.prefix = path.substr(0, path.size() - std::string(notice_path(p)).size());
      known = true;
    }
    if (!known)
      throw std::invalid_argument(option + " \"" + value + "\": the path " +
                                  (path.empty() ? "(none)" : path) + " is none of the endpoints" + allowed);
    if (s.provider == notice_provider::azure) s.query = query.empty() ? azure_events_version : query;
  }
  s.interval = documented_interval(s.provider);
  return s;
}

notice_client::notice_client(notice_source source) : source_(std::move(source)) {}
notice_client::~notice_client() = default;

notice_check notice_client::check() {
  switch (source_.provider) {
    case notice_provider::aws:
      return check_aws();
    case notice_provider::gcp:
      return check_gcp();
    case notice_provider::azure:
      return check_azure();
  }
  return {};
}

notice_check notice_client::check_aws() {
  auto http = client_for(source_.origin);
  const std::string token_url = source_.origin + source_.prefix + aws_token_path;
  const std::string notice_url = source_.origin + source_.prefix + aws_notice_path;
  for (int tries = 0; tries < 2; ++tries) {
    if (aws_token_.empty() || std::chrono::steady_clock::now() >= aws_token_expires_) {
      auto t = http->Put((source_.prefix + aws_token_path).c_str(),
                         {{"X-aws-ec2-metadata-token-ttl-seconds", std::to_string(aws_token_ttl_s)}}, "",
                         "text/plain");
      if (!t) return {std::nullopt, failed("PUT " + token_url, t)};
      if (t->status != 200 || t->body.empty()) return {std::nullopt, refused("PUT " + token_url, t)};
      aws_token_ = t->body;
      aws_token_expires_ = std::chrono::steady_clock::now() + std::chrono::seconds(aws_token_ttl_s - 60);
    }
    auto r =
        http->Get((source_.prefix + aws_notice_path).c_str(), {{"X-aws-ec2-metadata-token", aws_token_}});
    if (!r) return {std::nullopt, failed("GET " + notice_url, r)};
    if (r->status == 404) return {};  // no notice
    if (r->status == 401) {           // the token ended: a new one, once
      aws_token_.clear();
      continue;
    }
    if (r->status != 200) return {std::nullopt, refused("GET " + notice_url, r)};
    const auto j = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    const auto action = j.is_object() ? j.value("action", "") : "";
    const auto time = j.is_object() ? j.value("time", "") : "";
    const auto deadline = parse_iso8601_utc(time);
    if (action.empty() || !deadline)
      return {std::nullopt, "GET " + notice_url +
                                ": not an instance-action ({\"action\": ..., \"time\": "
                                "\"YYYY-MM-DDTHH:MM:SSZ\"}): " +
                                r->body.substr(0, 200)};
    return {preemption_notice{*deadline, "AWS spot interruption notice: " + action + " at " + time}, ""};
  }
  return {std::nullopt, "GET " + notice_url + ": HTTP 401 with a new session token too"};
}

notice_check notice_client::check_gcp() {
  auto http = client_for(source_.origin);
  const std::string url = source_.origin + source_.prefix + gcp_notice_path;
  auto r = http->Get((source_.prefix + gcp_notice_path).c_str(), {{"Metadata-Flavor", "Google"}});
  if (!r) return {std::nullopt, failed("GET " + url, r)};
  if (r->status != 200) return {std::nullopt, refused("GET " + url, r)};
  // Google's libraries take an answer without it for another server's (a proxy's, a captive
  // portal's).
  if (r->get_header_value("Metadata-Flavor") != "Google")
    return {std::nullopt,
            "GET " + url + ": the answer lacks Metadata-Flavor: Google (not the metadata server)"};
  if (r->body == "FALSE") return {};
  if (r->body == "TRUE") {
    const auto deadline = std::chrono::system_clock::now() + gcp_notice;
    return {
        preemption_notice{deadline, "GCP preemption notice: preempted, stopping by " + format_utc(deadline) +
                                        " (" + std::to_string(gcp_notice.count()) + " s)"},
        ""};
  }
  return {std::nullopt, "GET " + url + ": \"" + r->body.substr(0, 200) + "\" is neither TRUE nor FALSE"};
}

notice_check notice_client::check_azure() {
  auto http = client_for(source_.origin);
  const httplib::Headers metadata{{"Metadata", "true"}};
  if (azure_vm_name_.empty()) {  // the events name the VMs they concern
    const std::string path = source_.prefix + azure_name_path + "?" + azure_name_query;
    auto n = http->Get(path.c_str(), metadata);
    if (!n) return {std::nullopt, failed("GET " + source_.origin + path, n)};
    if (n->status != 200 || n->body.empty())
      return {std::nullopt, refused("GET " + source_.origin + path, n)};
    azure_vm_name_ = n->body;
  }
  const std::string path = source_.prefix + azure_events_path + "?" + source_.query;
  const std::string url = source_.origin + path;
  auto r = http->Get(path.c_str(), metadata);
  if (!r) return {std::nullopt, failed("GET " + url, r)};
  if (r->status != 200) return {std::nullopt, refused("GET " + url, r)};
  const auto j = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("Events") || !j["Events"].is_array())
    return {std::nullopt, "GET " + url + ": not a Scheduled Events document ({\"Events\": [...]}): " +
                              r->body.substr(0, 200)};
  std::optional<preemption_notice> notice;
  std::vector<std::string> ids;
  for (const auto& e : j["Events"]) {
    if (!e.is_object()) continue;
    const auto type = e.value("EventType", "");
    if (type != "Preempt" && type != "Terminate") continue;
    bool mine = false;
    if (e.contains("Resources") && e["Resources"].is_array())
      for (const auto& name : e["Resources"]) mine = mine || (name.is_string() && name == azure_vm_name_);
    if (!mine) continue;  // another VM of the availability set or scale set
    const auto not_before = e.value("NotBefore", "");
    // An event that has started has no NotBefore left: the VM goes now.
    const auto when = not_before.empty() ? std::chrono::system_clock::now() : parse_rfc1123_gmt(not_before);
    if (!when)
      return {std::nullopt, "GET " + url + ": event " + e.value("EventId", "?") + " has NotBefore \"" +
                                not_before + "\", not a time such as \"Sat, 28 Nov 2026 21:30:00 GMT\""};
    ids.push_back(e.value("EventId", ""));
    if (!notice || *when < notice->deadline)
      notice = preemption_notice{*when, "Azure Scheduled Event " + type + " (" + e.value("EventId", "?") +
                                            "), not before " +
                                            (not_before.empty() ? format_utc(*when) : not_before)};
  }
  if (notice) azure_event_ids_ = ids;
  return {notice, ""};
}

std::string notice_client::acknowledge() {
  if (source_.provider != notice_provider::azure || azure_event_ids_.empty()) return "";
  nlohmann::json body{{"StartRequests", nlohmann::json::array()}};
  for (const auto& id : azure_event_ids_) body["StartRequests"].push_back({{"EventId", id}});
  const std::string path = source_.prefix + azure_events_path + "?" + source_.query;
  auto http = client_for(source_.origin);
  auto r = http->Post(path.c_str(), {{"Metadata", "true"}}, body.dump(), "application/json");
  if (!r) return failed("POST " + source_.origin + path, r);
  if (r->status != 200) return refused("POST " + source_.origin + path, r);
  azure_event_ids_.clear();
  return "";
}

notice_watch::notice_watch(notice_source source, std::function<void(const preemption_notice&)> on_notice,
                           std::function<void(const std::string&)> warn)
    : client_(std::move(source)), on_notice_(std::move(on_notice)), warn_(std::move(warn)) {
  thread_ = std::thread([this] { run(); });
}

notice_watch::~notice_watch() { stop(); }

void notice_watch::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string notice_watch::acknowledge() {
  stop();  // the thread no longer uses the client
  return client_.acknowledge();
}

void notice_watch::run() {
  std::string down;  // the endpoint's problem while it lasts
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    const auto result = client_.check();
    if (!result.problem.empty() && down.empty() && warn_)
      warn_(client_.source().describe() + ": " + result.problem +
            "; no notice is assumed while it does not answer");
    else if (result.problem.empty() && !down.empty() && warn_)
      warn_(client_.source().describe() + " answers again");
    down = result.problem;
    if (result.notice) {
      if (on_notice_) on_notice_(*result.notice);
      return;
    }
    lock.lock();
    wake_.wait_for(lock, client_.source().interval, [this] { return stopping_; });
  }
}

}  // namespace cohort::core::cloud

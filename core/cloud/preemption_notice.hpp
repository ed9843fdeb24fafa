// Cloud preemption notices: what a provider's instance metadata endpoint says before it takes a
// spot (preemptible) VM away, asked as each provider documents it. AWS: IMDSv2, a session token
// (PUT /latest/api/token) then GET /latest/meta-data/spot/instance-action (404 until a notice;
// then {"action": ..., "time": ...}), every 5 s. GCP: GET /computeMetadata/v1/instance/preempted
// with Metadata-Flavor: Google ("TRUE" once preempted; the VM has 30 s), every second. Azure:
// Scheduled Events, GET /metadata/scheduledevents with Metadata: true (a Preempt or Terminate
// event for this VM, with its NotBefore), every second, and the event approved (StartRequests)
// once the node has drained. cluster-worker --preemption-notice watches one (notice_watch) and
// drains its node on a notice. No CAF, no torch.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace cohort::core::cloud {

enum class notice_provider { aws, gcp, azure };

// Where and how to ask for notices.
struct notice_source {
  notice_provider provider = notice_provider::aws;
  std::string origin;  // "http://HOST[:PORT]"
  std::string prefix;  // a path before the provider's own paths ("" for the provider's endpoint)
  std::string query;   // Azure: "api-version=..." (the URL form may name another version)
  std::chrono::milliseconds interval{5000};  // between two checks: the provider's documented rate
  // "AWS spot interruption notices at http://169.254.169.254/latest/meta-data/spot/instance-action"
  std::string describe() const;
};

// The documented polling rates (AWS: "check every 5 seconds"; Azure: "poll once per second"; GCP
// documents none for `preempted`, whose notice is 30 s: once per second too) and GCP's notice.
std::chrono::milliseconds documented_interval(notice_provider p);
constexpr std::chrono::seconds gcp_notice{30};

// Parses the value of `option` (--preemption-notice): aws, gcp or azure (the provider's own
// endpoint, moved by AWS_EC2_METADATA_SERVICE_ENDPOINT=http://HOST[:PORT] as the AWS SDKs allow
// and GCE_METADATA_HOST=HOST[:PORT] as Google's libraries do), or the http:// URL of one of the
// three endpoints, whose path says which protocol it speaks (.../latest/meta-data/spot/
// instance-action, .../computeMetadata/v1/instance/preempted, .../metadata/scheduledevents).
// `env` reads an environment variable ("" when unset). Throws std::invalid_argument naming the
// option (or variable), the value and what is allowed.
notice_source parse_notice_source(const std::string& value, const std::string& option,
                                  const std::function<std::string(const char*)>& env);

struct preemption_notice {
  std::chrono::system_clock::time_point deadline;  // when the VM goes
  // What the provider said, for logs and the job's reason: "AWS spot interruption notice: terminate
  // at 2026-11-28T21:30:00Z".
  std::string what;
};

// One check of the endpoint.
struct notice_check {
  std::optional<preemption_notice> notice;
  std::string problem;  // "": it answered (notice or not); else why no answer could be used
};

// Asks one endpoint; one thread at a time.
class notice_client {
 public:
  explicit notice_client(notice_source source);
  ~notice_client();
  notice_client(const notice_client&) = delete;
  notice_client& operator=(const notice_client&) = delete;

  // One check: a notice, none, or a problem (the endpoint down, refusing, or answering what the
  // protocol does not allow). A problem is never a notice.
  notice_check check();
  // Azure: approves the events of the notice (POST StartRequests), which lets Azure go on at once;
  // call it once this VM has no more use for the time left. Others: nothing. "" or the problem.
  std::string acknowledge();
  const notice_source& source() const { return source_; }

 private:
  notice_check check_aws();
  notice_check check_gcp();
  notice_check check_azure();

  notice_source source_;
  std::string aws_token_;
  std::chrono::steady_clock::time_point aws_token_expires_{};
  std::string azure_vm_name_;                 // this VM's name, from the instance metadata
  std::vector<std::string> azure_event_ids_;  // the events of the notice, to approve
};

// Checks a source on a thread of its own every source.interval until a notice comes (then
// `on_notice` runs once, on that thread, and the checks end) or it is stopped. `warn` hears, on
// that thread, when the endpoint stops answering (with why; no notice is assumed meanwhile) and
// when it answers again.
class notice_watch {
 public:
  notice_watch(notice_source source, std::function<void(const preemption_notice&)> on_notice,
               std::function<void(const std::string&)> warn);
  ~notice_watch();  // stops
  notice_watch(const notice_watch&) = delete;
  notice_watch& operator=(const notice_watch&) = delete;
  void stop();
  // After the notice: notice_client::acknowledge (Azure approves the event). "" or the problem.
  std::string acknowledge();

 private:
  void run();

  notice_client client_;
  std::function<void(const preemption_notice&)> on_notice_;
  std::function<void(const std::string&)> warn_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// Times as the providers write them, in UTC: "2026-11-28T21:30:00Z" (AWS) and "Sat, 28 Nov 2026
// 21:30:00 GMT" (Azure's NotBefore). nullopt when the text is not one.
std::optional<std::chrono::system_clock::time_point> parse_iso8601_utc(const std::string& text);
std::optional<std::chrono::system_clock::time_point> parse_rfc1123_gmt(const std::string& text);

}  // namespace cohort::core::cloud

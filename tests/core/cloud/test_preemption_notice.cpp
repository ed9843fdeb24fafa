// Preemption notices against a fake metadata server that speaks each provider's protocol as
// documented: the sources --preemption-notice names, one check per protocol (tokens, headers,
// the JSON shapes, the answers before a notice), an endpoint that is down or is not one, and the
// watch that checks at its interval.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <map>
#include <mutex>

#include "core/cloud/preemption_notice.hpp"
#include "tests/support/fake_metadata_server.hpp"

using namespace cohort::core::cloud;
using namespace std::chrono_literals;
using cohort::test::fake_metadata_server;

namespace {

const std::function<std::string(const char*)> no_env = [](const char*) { return std::string(); };

std::function<std::string(const char*)> env_of(std::map<std::string, std::string> vars) {
  return [vars](const char* name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

// A port nothing listens on (a fake server held it a moment ago).
int closed_port() {
  fake_metadata_server gone;
  return gone.port();
}

std::chrono::system_clock::time_point utc(const std::string& iso) { return parse_iso8601_utc(iso).value(); }

}  // namespace

TEST_CASE(
    "aws, gcp and azure name each provider's own endpoint at its documented rate, moved as the "
    "providers' libraries allow",
    "[core][cloud]") {
  const auto aws = parse_notice_source("aws", "--preemption-notice", no_env);
  CHECK(aws.provider == notice_provider::aws);
  CHECK(aws.origin == "http://169.254.169.254");
  CHECK(aws.interval == 5s);
  CHECK(aws.describe() ==
        "AWS spot interruption notices at http://169.254.169.254/latest/meta-data/spot/instance-action");
  const auto gcp = parse_notice_source("gcp", "--preemption-notice", no_env);
  CHECK(gcp.provider == notice_provider::gcp);
  CHECK(gcp.origin == "http://169.254.169.254");
  CHECK(gcp.interval == 1s);
  const auto azure = parse_notice_source("azure", "--preemption-notice", no_env);
  CHECK(azure.provider == notice_provider::azure);
  CHECK(azure.interval == 1s);
  CHECK(azure.describe() ==
        "Azure Scheduled Events (Preempt, Terminate) at "
        "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01");

  const auto env = env_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1338/"},
                           {"GCE_METADATA_HOST", "127.0.0.1:8080"}});
  CHECK(parse_notice_source("aws", "--preemption-notice", env).origin == "http://127.0.0.1:1338");
  CHECK(parse_notice_source("gcp", "--preemption-notice", env).origin == "http://127.0.0.1:8080");
  CHECK_THROWS_WITH(
      parse_notice_source("aws", "--preemption-notice",
                          env_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "169.254.169.254"}})),
      Catch::Contains("AWS_EC2_METADATA_SERVICE_ENDPOINT: \"169.254.169.254\" is not an endpoint") &&
          Catch::Contains("allowed: http://HOST[:PORT]"));
}

TEST_CASE(
    "a URL of one of the three endpoints speaks that endpoint's protocol; any other value is "
    "refused naming the option and what is allowed",
    "[core][cloud]") {
  const auto aws = parse_notice_source("http://10.0.0.1:81/latest/meta-data/spot/instance-action",
                                       "--preemption-notice", no_env);
  CHECK(aws.provider == notice_provider::aws);
  CHECK(aws.origin == "http://10.0.0.1:81");
  CHECK(aws.prefix.empty());
  CHECK(aws.interval == 5s);
  const auto gcp = parse_notice_source("http://10.0.0.1/computeMetadata/v1/instance/preempted",
                                       "--preemption-notice", no_env);
  CHECK(gcp.provider == notice_provider::gcp);
  const auto azure =
      parse_notice_source("http://10.0.0.1:82/metadata/scheduledevents", "--preemption-notice", no_env);
  CHECK(azure.provider == notice_provider::azure);
  CHECK(azure.query == "api-version=2020-07-01");
  CHECK(parse_notice_source("http://10.0.0.1/metadata/scheduledevents?api-version=2019-08-01",
                            "--preemption-notice", no_env)
            .query == "api-version=2019-08-01");
  const auto under =
      parse_notice_source("http://10.0.0.1/proxy/metadata/scheduledevents", "--preemption-notice", no_env);
  CHECK(under.prefix == "/proxy");

  const auto allowed =
      Catch::Contains("allowed: aws, gcp, azure, or the http:// URL of one of their endpoints");
  CHECK_THROWS_WITH(
      parse_notice_source("oracle", "--preemption-notice", no_env),
      Catch::Contains("--preemption-notice \"oracle\": not a provider nor an http:// URL") && allowed);
  CHECK_THROWS_WITH(
      parse_notice_source("https://10.0.0.1/metadata/scheduledevents", "--preemption-notice", no_env),
      Catch::Contains("not a provider nor an http:// URL") && allowed);
  CHECK_THROWS_WITH(parse_notice_source("http://10.0.0.1/latest/meta-data", "--preemption-notice", no_env),
                    Catch::Contains("the path /latest/meta-data is none of the endpoints") && allowed);
  CHECK_THROWS_WITH(parse_notice_source("http:///metadata/scheduledevents", "--preemption-notice", no_env),
                    Catch::Contains("no host in the URL") && allowed);
}

TEST_CASE(
    "AWS: no notice while instance-action is 404, then its action and time, asked with an IMDSv2 "
    "session token that is fetched again once refused",
    "[core][cloud]") {
  fake_metadata_server fake;
  notice_client client(parse_notice_source("aws", "--preemption-notice",
                                           env_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", fake.origin()}})));
  for (int i = 0; i < 3; ++i) {
    const auto none = client.check();
    CHECK(none.problem.empty());
    CHECK_FALSE(none.notice);
  }
  CHECK(fake.requests("/latest/api/token") == 1);  // one session token for every check
  CHECK(fake.requests("/latest/meta-data/spot/instance-action") == 3);

  fake.expire_aws_tokens();
  fake.set_aws_notice("terminate", "2026-11-28T21:30:00Z");
  const auto seen = client.check();
  INFO(seen.problem);
  REQUIRE(seen.notice);
  CHECK(seen.notice->deadline == utc("2026-11-28T21:30:00Z"));
  CHECK(seen.notice->what == "AWS spot interruption notice: terminate at 2026-11-28T21:30:00Z");
  CHECK(fake.requests("/latest/api/token") == 2);
  CHECK(fake.refused() == 1);           // the expired token's one 401
  CHECK(client.acknowledge().empty());  // AWS has nothing to approve
}

TEST_CASE("GCP: FALSE is no notice and TRUE one 30 s away, asked with Metadata-Flavor: Google",
          "[core][cloud]") {
  fake_metadata_server fake;
  notice_client client(
      parse_notice_source("gcp", "--preemption-notice", env_of({{"GCE_METADATA_HOST", fake.host_port()}})));
  const auto none = client.check();
  CHECK(none.problem.empty());
  CHECK_FALSE(none.notice);
  fake.set_gcp_preempted(true);
  const auto before = std::chrono::system_clock::now();
  const auto seen = client.check();
  REQUIRE(seen.notice);
  CHECK(seen.notice->deadline >= before + 30s);
  CHECK(seen.notice->deadline <= std::chrono::system_clock::now() + 30s);
  CHECK_THAT(seen.notice->what, Catch::StartsWith("GCP preemption notice: preempted, stopping by "));
  CHECK(fake.refused() == 0);

  // Without the header the server refuses (403), which is a problem, not a notice.
  httplib::Client bare(fake.origin());
  CHECK(bare.Get("/computeMetadata/v1/instance/preempted")->status == 403);
}

TEST_CASE(
    "Azure: only a Preempt or Terminate event naming this VM is a notice, due at its NotBefore, "
    "and acknowledging it approves its EventId",
    "[core][cloud]") {
  fake_metadata_server fake;
  fake.set_azure_vm_name("vm-7");
  notice_client client(
      parse_notice_source(fake.origin() + "/metadata/scheduledevents", "--preemption-notice", no_env));
  CHECK_FALSE(client.check().notice);
  fake.add_azure_event("freeze-1", "Freeze", {"vm-7"}, "Sat, 28 Nov 2026 21:20:00 GMT");
  fake.add_azure_event("other-vm", "Preempt", {"vm-3"}, "Sat, 28 Nov 2026 21:21:00 GMT");
  const auto unrelated = client.check();
  CHECK(unrelated.problem.empty());
  CHECK_FALSE(unrelated.notice);
  CHECK(client.acknowledge().empty());
  CHECK(fake.azure_acknowledged().empty());  // nothing of ours to approve

  fake.add_azure_event("spot-9", "Preempt", {"vm-3", "vm-7"}, "Sat, 28 Nov 2026 21:30:30 GMT");
  const auto seen = client.check();
  INFO(seen.problem);
  REQUIRE(seen.notice);
  CHECK(seen.notice->deadline == utc("2026-11-28T21:30:30Z"));
  CHECK(seen.notice->what ==
        "Azure Scheduled Event Preempt (spot-9), not before Sat, 28 Nov 2026 21:30:30 GMT");
  CHECK(fake.requests("/metadata/instance/compute/name") == 1);  // the VM's name, asked once
  CHECK(client.acknowledge().empty());
  CHECK(fake.azure_acknowledged() == std::vector<std::string>{"spot-9"});
  CHECK(fake.refused() == 0);
}

TEST_CASE(
    "an endpoint that is down, or answers what its protocol does not allow, is a problem and never "
    "a notice",
    "[core][cloud]") {
  const int port = closed_port();
  for (const auto* provider : {"aws", "gcp"}) {
    notice_client down(parse_notice_source(
        provider, "--preemption-notice",
        env_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:" + std::to_string(port)},
                {"GCE_METADATA_HOST", "127.0.0.1:" + std::to_string(port)}})));
    const auto r = down.check();
    CHECK_FALSE(r.notice);
    CHECK_THAT(r.problem,
               Catch::Contains("127.0.0.1:" + std::to_string(port)) && Catch::Contains("no answer"));
  }
  fake_metadata_server fake;
  fake.answer_garbage("<html>captive portal</html>");
  for (const auto* path : {"/latest/meta-data/spot/instance-action", "/computeMetadata/v1/instance/preempted",
                           "/metadata/scheduledevents"}) {
    notice_client wrong(parse_notice_source(fake.origin() + path, "--preemption-notice", no_env));
    const auto r = wrong.check();
    INFO(path);
    CHECK_FALSE(r.notice);
    CHECK_FALSE(r.problem.empty());
  }
}

TEST_CASE(
    "a watch checks at its interval, warns once when the endpoint stops answering and once when it "
    "answers again, and reports a notice once",
    "[core][cloud]") {
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::string> warnings;
  std::vector<preemption_notice> notices;
  const auto wait_until = [&](auto pred) {
    std::unique_lock<std::mutex> lock(m);
    return cv.wait_for(lock, 60s, pred);
  };
  const int port = closed_port();
  auto source = parse_notice_source(
      "aws", "--preemption-notice",
      env_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:" + std::to_string(port)}}));
  source.interval = 10ms;
  notice_watch watch(
      source,
      [&](const preemption_notice& n) {
        std::lock_guard<std::mutex> lock(m);
        notices.push_back(n);
        cv.notify_all();
      },
      [&](const std::string& w) {
        std::lock_guard<std::mutex> lock(m);
        warnings.push_back(w);
        cv.notify_all();
      });
  REQUIRE(wait_until([&] { return !warnings.empty(); }));
  CHECK_THAT(warnings[0],
             Catch::StartsWith("AWS spot interruption notices at http://127.0.0.1:" + std::to_string(port)) &&
                 Catch::Contains("no answer") &&
                 Catch::EndsWith("no notice is assumed while it does not answer"));

  fake_metadata_server fake(port);  // the endpoint comes up where it was looked for
  REQUIRE(fake.wait_for_requests("/latest/meta-data/spot/instance-action", 3, 60s));  // 404s, no notice
  {
    std::lock_guard<std::mutex> lock(m);
    CHECK(notices.empty());
    REQUIRE(warnings.size() == 2);  // however many checks failed: one warning, then one "again"
    CHECK_THAT(warnings[1], Catch::EndsWith("answers again"));
  }
  fake.set_aws_notice("stop", "2026-11-28T22:00:00Z");
  REQUIRE(wait_until([&] { return !notices.empty(); }));
  const int asked = fake.requests("/latest/meta-data/spot/instance-action");
  watch.stop();
  CHECK(fake.requests("/latest/meta-data/spot/instance-action") == asked);  // no check after the notice
  std::lock_guard<std::mutex> lock(m);
  CHECK(notices.size() == 1);
  CHECK(notices[0].deadline == utc("2026-11-28T22:00:00Z"));
}

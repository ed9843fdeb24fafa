// The head's logic alone: placement of waiting jobs, reservations and the failure policy.
#include <catch2/catch.hpp>

#include "actors/head_state.hpp"
#include "config/job_spec.hpp"
#include "tests/actors/job_specs.hpp"

using namespace cohort::actors;

namespace {

std::string submit(head_state& head, const cohort::test::lr_job_options& o) {
  auto json = cohort::test::linear_regression_job(o);
  return head.submit(cohort::config::parse_job_spec(json), json);
}

double free_cpu(const head_state& head, const std::string& node) {
  auto avail = head.available(node);
  auto it = avail.find("CPU");
  return it == avail.end() ? 0.0 : it->second;
}

failure_cause worker_failure(int attempt, int rank) {
  return failure_cause{attempt, rank, "n1", "killed"};
}

}  // namespace

TEST_CASE("a job waits PENDING until a node with room registers", "[actors]") {
  head_state head;
  auto id = submit(head, {});
  CHECK(head.schedule().empty());
  CHECK(head.find(id)->state == job_state::pending);
  head.add_node({"n1", {{"CPU", 2}}});
  auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].job_id == id);
  CHECK(starts[0].trainer_node == "n1");
  CHECK(starts[0].rank_nodes == std::vector<std::string>{"n1", "n1"});
  CHECK(free_cpu(head, "n1") == Approx(0));
  CHECK(head.schedule().empty());  // placed once
}

TEST_CASE("an ended attempt gives its resources back", "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 2}}});
  auto id = submit(head, {});
  auto starts = head.schedule();
  head.on_running(id, 0);
  CHECK(head.find(id)->state == job_state::running);
  head.on_outcome({id, 0, true, {}});
  CHECK(head.find(id)->state == job_state::succeeded);
  CHECK(free_cpu(head, "n1") == Approx(2));
}

TEST_CASE("max_failures bounds the restarts", "[actors]") {
  auto max_failures = GENERATE(0, 1, 3);
  head_state head;
  head.add_node({"n1", {{"CPU", 2}}});
  cohort::test::lr_job_options o;
  o.max_failures = max_failures;
  auto id = submit(head, o);
  for (int attempt = 0; attempt <= max_failures; ++attempt) {
    REQUIRE(head.schedule().size() == 1);
    head.on_running(id, attempt);
    head.on_outcome({id, attempt, false, worker_failure(attempt, 1)});
  }
  const auto* r = head.find(id);
  CHECK(r->state == job_state::failed);
  CHECK(r->attempts == max_failures + 1);
  CHECK(r->failures.size() == static_cast<std::size_t>(max_failures + 1));
  CHECK_THAT(r->reason, Catch::Contains("worker rank 1 on node n1"));
  CHECK(head.schedule().empty());
}

TEST_CASE("max_failures -1 restarts forever", "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 2}}});
  cohort::test::lr_job_options o;
  o.max_failures = -1;
  auto id = submit(head, o);
  for (int attempt = 0; attempt < 20; ++attempt) {
    REQUIRE(head.schedule().size() == 1);
    head.on_outcome({id, attempt, false, worker_failure(attempt, 0)});
    CHECK(head.find(id)->state == job_state::restarting);
  }
}

TEST_CASE("a late report from an older attempt changes nothing", "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 2}}});
  cohort::test::lr_job_options o;
  o.max_failures = -1;
  auto id = submit(head, o);
  head.schedule();
  head.on_outcome({id, 0, false, worker_failure(0, 0)});
  head.schedule();  // attempt 1 starts
  head.on_outcome({id, 0, false, worker_failure(0, 1)});
  CHECK(head.find(id)->failures.size() == 1);
  CHECK(head.find(id)->attempts == 2);
}

TEST_CASE("a stopped job frees its resources and stays stopped", "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 2}}});
  auto id = submit(head, {});
  head.schedule();
  CHECK(head.stop(id, "stopped on request"));
  CHECK(head.find(id)->state == job_state::stopped);
  CHECK(free_cpu(head, "n1") == Approx(2));
  CHECK_FALSE(head.stop(id, "again"));
  head.on_outcome({id, 0, false, worker_failure(0, 0)});
  CHECK(head.find(id)->state == job_state::stopped);
}

TEST_CASE("a restored running job is placed again", "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 2}}});
  job_record r;
  r.id = "job-0007";
  r.name = "lr";
  r.state = job_state::running;
  r.attempts = 1;
  r.spec_json = cohort::test::linear_regression_job({});
  head.restore(r);
  CHECK(head.find("job-0007")->state == job_state::restarting);
  auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].attempt == 1);
  auto next = submit(head, {});
  CHECK(next == "job-0008");
}

TEST_CASE("a restored RUNNING job keeps its placement until its trainer announces itself",
          "[actors]") {
  head_state head;
  job_record r;
  r.id = "job-0003";
  r.name = "lr";
  r.state = job_state::running;
  r.attempts = 1;
  r.trainer_node = "n1";
  r.rank_nodes = {"n1", "n1"};
  r.spec_json = cohort::test::linear_regression_job({});
  head.restore(r);
  CHECK(head.awaiting_adoption() == std::vector<std::string>{"job-0003"});
  head.add_node({"n1", {{"CPU", 2}}});
  CHECK(free_cpu(head, "n1") == Approx(0));  // still held for the running attempt
  CHECK(head.schedule().empty());
  CHECK_FALSE(head.on_trainer_started("job-0003", 1));  // not the running attempt
  CHECK(head.on_trainer_started("job-0003", 0));
  CHECK(head.awaiting_adoption().empty());
  CHECK(head.find("job-0003")->state == job_state::running);
  head.on_outcome({"job-0003", 0, true, {}});
  CHECK(head.find("job-0003")->state == job_state::succeeded);
  CHECK(free_cpu(head, "n1") == Approx(2));
}

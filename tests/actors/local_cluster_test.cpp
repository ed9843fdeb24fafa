// The embedded cluster driven as a user would: submit jobs, follow them, stop them, and the
// failure drills of the supervision rules (a worker killed, a node lost, a node joining).
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <set>

#include "actors/local_cluster.hpp"
#include "tests/actors/job_specs.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::actors;
using namespace std::chrono_literals;
using cohort::test::linear_regression_job;
using cohort::test::lr_job_options;

namespace {

node_info node(const std::string& name, double cpus, std::map<std::string, double> extra = {}) {
  extra["CPU"] = cpus;
  return node_info{name, extra};
}

// The job's current attempt (1-based) waits before `step` (run.hold_before_step).
bool is_held_before(const job_record& r, std::int64_t step, std::int32_t attempt = 1) {
  return r.state == job_state::running && r.attempts == attempt && r.held_before_step == step;
}

}  // namespace

TEST_CASE("a linear-regression job on two nodes succeeds and fits the data", "[actors]") {
  cohort::test::temp_dir dir;
  local_cluster cluster({node("n1", 1), node("n2", 1)});
  lr_job_options o;
  o.storage_path = dir.str();
  o.strategy = "SPREAD";
  auto id = cluster.submit(linear_regression_job(o));
  auto last = cluster.follow(id, 60s);
  REQUIRE(last.state == job_state::succeeded);
  CHECK(last.attempts == 1);
  CHECK(last.step == 40);
  CHECK(last.loss < 0.01);  // the group converged on the noise floor (0.01²) plus a little
  CHECK(last.rank_nodes == std::vector<std::string>{"n1", "n2"});
  auto logs = cluster.logs(id);
  std::set<int> ranks;
  for (const auto& l : logs) ranks.insert(l.rank);
  CHECK(ranks == std::set<int>{0, 1});
  CHECK(std::filesystem::exists(dir.path() / "lr" / "metrics.jsonl"));
}

TEST_CASE("rank 0 and the trainer go to the large_cpu_mem node", "[actors]") {
  cohort::test::temp_dir dir;
  local_cluster cluster({node("small", 4), node("big", 4, {{"large_cpu_mem", 1}})});
  lr_job_options o;
  o.storage_path = dir.str();
  o.workers = 3;
  o.strategy = "SPREAD";
  o.trainer_resources = R"({"large_cpu_mem": 0.01})";
  auto id = cluster.submit(linear_regression_job(o));
  auto last = cluster.follow(id, 60s);
  REQUIRE(last.state == job_state::succeeded);
  CHECK(last.trainer_node == "big");
  REQUIRE(last.rank_nodes.size() == 3);
  CHECK(last.rank_nodes[0] == "big");
}

TEST_CASE("a killed worker restarts the group and the job succeeds", "[actors]") {
  auto max_failures = GENERATE(-1, 2);
  cohort::test::temp_dir dir;
  local_cluster cluster({node("n1", 2)});
  lr_job_options o;
  o.storage_path = dir.str();
  o.max_failures = max_failures;
  o.steps = 30;
  o.hold_before_step = 4;
  auto id = cluster.submit(linear_regression_job(o));
  cluster.wait_until(id, [](const job_record& r) { return is_held_before(r, 4); }, 60s);
  REQUIRE(cluster.kill_worker(id, 1));
  cluster.wait_until(id, [](const job_record& r) { return is_held_before(r, 4, 2); }, 60s);
  cluster.release(id);
  auto last = cluster.follow(id, 60s);
  REQUIRE(last.state == job_state::succeeded);
  CHECK(last.attempts == 2);
  REQUIRE(last.failures.size() == 1);
  CHECK(last.failures[0].rank == 1);
  CHECK(last.failures[0].node == "n1");
  CHECK(last.failures[0].reason == "killed");
}

TEST_CASE("with max_failures 0 a killed worker fails the job at once, naming the worker",
          "[actors]") {
  cohort::test::temp_dir dir;
  local_cluster cluster({node("n1", 2)});
  lr_job_options o;
  o.storage_path = dir.str();
  o.max_failures = 0;
  o.steps = 20;
  o.hold_before_step = 3;
  auto id = cluster.submit(linear_regression_job(o));
  cluster.wait_until(id, [](const job_record& r) { return is_held_before(r, 3); }, 60s);
  REQUIRE(cluster.kill_worker(id, 0));
  auto last = cluster.follow(id, 30s);
  REQUIRE(last.state == job_state::failed);
  CHECK(last.attempts == 1);
  CHECK_THAT(last.reason, Catch::Contains("worker rank 0 on node n1") &&
                              Catch::Contains("killed") &&
                              Catch::Contains("max_failures=0"));
}

TEST_CASE("a job whose node dies waits PENDING and finishes on a node that joins later",
          "[actors]") {
  cohort::test::temp_dir dir;
  local_cluster cluster({node("a", 2), node("b", 1)});
  lr_job_options o;
  o.storage_path = dir.str();
  o.max_failures = -1;
  o.steps = 30;
  o.hold_before_step = 3;
  o.strategy = "STRICT_PACK";
  auto id = cluster.submit(linear_regression_job(o));
  auto running = cluster.wait_until(id, [](const job_record& r) { return is_held_before(r, 3); }, 60s);
  REQUIRE(running.trainer_node == "a");
  cluster.kill_node("a");
  auto pending = cluster.wait_until(
      id, [](const job_record& r) { return r.state == job_state::pending; }, 30s);
  CHECK_THAT(pending.reason, Catch::Contains("CPU"));
  cluster.add_node(node("c", 2));
  cluster.wait_until(id, [](const job_record& r) { return is_held_before(r, 3, 2); }, 60s);
  cluster.release(id);
  auto last = cluster.follow(id, 60s);
  REQUIRE(last.state == job_state::succeeded);
  CHECK(last.trainer_node == "c");
  CHECK(last.rank_nodes == std::vector<std::string>{"c", "c"});
  CHECK(last.attempts == 2);
}

TEST_CASE("a killed trainer is restarted by the head and the job succeeds", "[actors]") {
  cohort::test::temp_dir dir;
  local_cluster cluster({node("n1", 2)});
  lr_job_options o;
  o.storage_path = dir.str();
  o.max_failures = 1;
  o.steps = 30;
  o.hold_before_step = 3;
  auto id = cluster.submit(linear_regression_job(o));
  cluster.wait_until(id, [](const job_record& r) { return is_held_before(r, 3); }, 60s);
  REQUIRE(cluster.kill_trainer(id));
  cluster.wait_until(id, [](const job_record& r) { return is_held_before(r, 3, 2); }, 60s);
  cluster.release(id);
  auto last = cluster.follow(id, 60s);
  REQUIRE(last.state == job_state::succeeded);
  CHECK(last.attempts == 2);
  REQUIRE(last.failures.size() == 1);
  CHECK(last.failures[0].rank == -1);
  CHECK_THAT(last.failures[0].reason, Catch::Contains("trainer died: killed"));
}

TEST_CASE("a stopped job ends STOPPED, even while held, and frees its resources for the next job",
          "[actors]") {
  cohort::test::temp_dir dir;
  local_cluster cluster({node("n1", 2)});
  lr_job_options o;
  o.storage_path = dir.str();
  o.steps = 10;
  o.hold_before_step = 2;
  auto first = cluster.submit(linear_regression_job(o));
  cluster.wait_until(first, [](const job_record& r) { return is_held_before(r, 2); }, 60s);
  o.name = "second";
  o.hold_before_step = 0;
  auto second = cluster.submit(linear_regression_job(o));
  CHECK(cluster.status(second).state == job_state::pending);
  auto stopped = cluster.stop(first);
  CHECK(stopped.state == job_state::stopped);
  auto last = cluster.follow(second, 60s);
  CHECK(last.state == job_state::succeeded);
  CHECK(cluster.status(first).state == job_state::stopped);
  CHECK(cluster.status(first).held_before_step == 0);
  CHECK_THROWS_WITH(cluster.release(second), Catch::Contains("has no run.hold_before_step"));
}

TEST_CASE("a malformed job spec is refused with the validation message", "[actors]") {
  local_cluster cluster({node("n1", 1)});
  CHECK_THROWS_WITH(cluster.submit(R"({"name": "x", "scaling": {"num_workers": 0}})"),
                    Catch::Contains("scaling.num_workers"));
}

TEST_CASE("a causal_lm job without a model or training data is refused at submit", "[actors]") {
  local_cluster cluster({node("n1", 1)});
  CHECK_THROWS_WITH(cluster.submit(R"({"name": "lm", "workload": "causal_lm"})"),
                    Catch::Contains("model"));
}

// The head's logic alone: placement of waiting jobs, reservations, GPU isolation and the failure
// policy.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

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

// The record of a job in its first attempt, RUNNING with its trainer on n1, as a store keeps it.
job_record running_record(const std::string& id, std::vector<std::string> rank_nodes,
                          const std::string& spec_json) {
  job_record r;
  r.id = id;
  r.name = "lr";
  r.state = job_state::running;
  r.attempts = 1;
  r.trainer_node = "n1";
  r.rank_nodes = std::move(rank_nodes);
  r.spec_json = spec_json;
  return r;
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
  head.restore(running_record("job-0003", {"n1", "n1"}, cohort::test::linear_regression_job({})));
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

// ---- GPU isolation and GPU refusals ----

namespace {

// A linear-regression job whose workers each ask for `gpus` GPUs.
std::string gpu_job(head_state& head, const std::string& name, int workers, double gpus) {
  cohort::test::lr_job_options o;
  o.name = name;
  o.workers = workers;
  auto spec = nlohmann::json::parse(cohort::test::linear_regression_job(o));
  spec["scaling"]["use_gpu"] = true;
  spec["scaling"]["resources_per_worker"]["GPU"] = gpus;
  return head.submit(cohort::config::parse_job_spec(spec.dump()), spec.dump());
}

node_info gpu_node(const std::string& name, int gpus, const std::string& note = "") {
  node_info n{name, {{"CPU", 8}}};
  if (gpus > 0) n.resources["GPU"] = gpus;
  for (int i = 0; i < gpus; ++i) n.gpu_ids.push_back("GPU-" + name + "-" + std::to_string(i));
  n.gpu_note = note;
  return n;
}

using gpu_lists = std::vector<std::vector<std::int32_t>>;

}  // namespace

TEST_CASE("two jobs on one node never get the same GPU", "[actors]") {
  head_state head;
  head.add_node(gpu_node("n1", 4));
  auto a = gpu_job(head, "a", 2, 1);
  auto b = gpu_job(head, "b", 2, 1);
  auto starts = head.schedule();
  REQUIRE(starts.size() == 2);
  CHECK(starts[0].rank_gpus == gpu_lists{{0}, {1}});
  CHECK(starts[1].rank_gpus == gpu_lists{{2}, {3}});
  CHECK(head.find(a)->rank_gpus == gpu_lists{{0}, {1}});
  CHECK(head.find(b)->rank_gpus == gpu_lists{{2}, {3}});
  CHECK(head.gpu_use("n1") == std::vector<double>{1, 1, 1, 1});
}

TEST_CASE("the GPUs of a finished, failed or stopped job, or of a lost node, are reused",
          "[actors]") {
  head_state head;
  head.add_node(gpu_node("n1", 1));
  auto first = gpu_job(head, "first", 1, 1);
  auto second = gpu_job(head, "second", 1, 1);
  auto third = gpu_job(head, "third", 1, 1);
  REQUIRE(head.schedule().size() == 1);
  CHECK(head.find(second)->state == job_state::pending);
  head.on_outcome({first, 0, true, {}});  // finished
  CHECK(head.find(first)->rank_gpus.empty());
  auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].job_id == second);
  CHECK(starts[0].rank_gpus == gpu_lists{{0}});
  head.on_outcome({second, 0, false, worker_failure(0, 0)});  // failed, max_failures 0
  CHECK(head.find(second)->state == job_state::failed);
  starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].job_id == third);
  CHECK(head.stop(third, "stopped on request"));
  CHECK(head.gpu_use("n1") == std::vector<double>{0});
  // A lost node's GPUs come back when it registers again with no attempt holding them.
  auto fourth = gpu_job(head, "fourth", 1, 1);
  REQUIRE(head.schedule().size() == 1);
  head.remove_node("n1");
  head.on_trainer_lost(fourth, 0, "node n1 was lost");
  head.add_node(gpu_node("n1", 1));
  CHECK(head.gpu_use("n1") == std::vector<double>{0});
}

TEST_CASE("fractional GPU bundles share one GPU index", "[actors]") {
  head_state head;
  head.add_node(gpu_node("n1", 2));
  gpu_job(head, "halves", 2, 0.5);
  auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].rank_gpus == gpu_lists{{0}, {0}});
  CHECK(head.gpu_use("n1") == std::vector<double>{1, 0});
}

TEST_CASE("a node that registers again keeps the GPUs its running attempts hold", "[actors]") {
  head_state head;
  head.add_node(gpu_node("n1", 2));
  gpu_job(head, "a", 1, 1);
  REQUIRE(head.schedule().size() == 1);
  head.add_node(gpu_node("n1", 2));
  CHECK(head.gpu_use("n1") == std::vector<double>{1, 0});
  auto b = gpu_job(head, "b", 1, 1);
  auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].rank_gpus == gpu_lists{{1}});
  CHECK(head.find(b)->rank_gpus == gpu_lists{{1}});
}

TEST_CASE("a restored RUNNING job keeps its GPU indices when its node registers", "[actors]") {
  head_state head;
  cohort::test::lr_job_options o;
  o.workers = 1;
  auto spec = nlohmann::json::parse(cohort::test::linear_regression_job(o));
  spec["scaling"]["use_gpu"] = true;
  auto r = running_record("job-0007", {"n1"}, spec.dump());
  r.rank_gpus = {{1}};
  head.restore(r);
  head.add_node(gpu_node("n1", 2));
  CHECK(head.gpu_use("n1") == std::vector<double>{0, 1});
}

TEST_CASE("a job asking more GPUs per worker than any node offers fails, naming the numbers",
          "[actors]") {
  head_state head;
  auto early = gpu_job(head, "early", 1, 4);
  head.schedule();
  CHECK(head.find(early)->state == job_state::pending);  // no node yet: nothing to judge by
  head.add_node(gpu_node("n1", 2));
  head.add_node(gpu_node("n2", 1));
  CHECK(head.schedule().empty());
  CHECK(head.find(early)->state == job_state::failed);
  CHECK(head.find(early)->reason ==
        "scaling.resources_per_worker.GPU 4 per worker: the largest node offers 2 GPUs");
  auto fits = gpu_job(head, "fits", 1, 2);
  CHECK(head.schedule().size() == 1);
  CHECK(head.find(fits)->rank_nodes == std::vector<std::string>{"n1"});
}

TEST_CASE("a GPU job on a cluster whose nodes offer no GPUs fails with the nodes' reasons",
          "[actors]") {
  head_state head;
  head.add_node(gpu_node("n1", 0, "this build of cohort has no CUDA (configured with COHORT_CUDA=OFF)"));
  auto id = gpu_job(head, "gpu", 1, 1);
  head.schedule();
  CHECK(head.find(id)->state == job_state::failed);
  CHECK(head.find(id)->reason ==
        "scaling.resources_per_worker.GPU 1 per worker: no node of this cluster offers GPUs (n1: "
        "this build of cohort has no CUDA (configured with COHORT_CUDA=OFF))");
}

TEST_CASE("a GPU job whose GPU node is gone waits PENDING for it to come back", "[actors]") {
  head_state head;
  head.add_node(gpu_node("gpu", 2));
  head.add_node(gpu_node("cpu", 0));
  head.remove_node("gpu");
  auto id = gpu_job(head, "waits", 1, 2);
  CHECK(head.schedule().empty());
  CHECK(head.find(id)->state == job_state::pending);
  head.add_node(gpu_node("gpu", 2));
  CHECK(head.schedule().size() == 1);
}

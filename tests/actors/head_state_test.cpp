// The head's logic alone: placement of waiting jobs, reservations, GPU isolation and the failure
// policy.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <nlohmann/json.hpp>

#include "actors/head_state.hpp"
#include "config/job_spec.hpp"
#include "config/nodes_spec.hpp"
#include "net/json_inspector.hpp"
#include "tests/actors/job_specs.hpp"
#include "tests/core/train/tiny_data.hpp"

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

// Rank 0's report of `step` of `total` in the job's first attempt.
progress_report rank0_report(const std::string& id, std::int64_t step, std::int64_t total) {
  progress_report r;
  r.job_id = id;
  r.step = step;
  r.total_steps = total;
  return r;
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

// A two-worker job under max_failures -1 on node n1, its first attempt started.
std::string started_forever_job(head_state& head) {
  head.add_node({"n1", {{"CPU", 2}}});
  cohort::test::lr_job_options o;
  o.max_failures = -1;
  auto id = submit(head, o);
  REQUIRE(head.schedule().size() == 1);
  return id;
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

TEST_CASE("equal nodes take ranks in name order, whatever order they registered in", "[actors]") {
  head_state head;
  head.add_node({"n2", {{"CPU", 1}}});
  head.add_node({"n1", {{"CPU", 1}}});
  head.add_node({"n2", {{"CPU", 1}}});  // registering again keeps its place
  REQUIRE(head.nodes().size() == 2);
  CHECK(head.nodes()[0].name == "n1");
  submit(head, {});
  const auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].trainer_node == "n1");
  CHECK(starts[0].rank_nodes == std::vector<std::string>{"n1", "n2"});
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

TEST_CASE("a bad-input failure ends the job FAILED at once under max_failures -1, naming the reason",
          "[actors]") {
  head_state head;
  const auto id = started_forever_job(head);
  failure_cause cause{0, 1, "n1", "data.train: /etc/passwd/manifest.json: cannot open",
                      failure_kind::bad_input};
  head.on_outcome({id, 0, false, cause});
  const auto* r = head.find(id);
  CHECK(r->state == job_state::failed);
  CHECK(r->attempts == 1);
  REQUIRE(r->failures.size() == 1);
  CHECK(r->failures[0].kind == failure_kind::bad_input);
  CHECK_THAT(r->reason, Catch::StartsWith("bad input: worker rank 1 on node n1"));
  CHECK_THAT(r->reason, Catch::Contains("/etc/passwd/manifest.json: cannot open"));
  CHECK_THAT(r->reason, Catch::Contains("no restart can fix this"));
  CHECK(head.schedule().empty());
  CHECK(free_cpu(head, "n1") == Approx(2));
}

TEST_CASE("a worker killed by SIGKILL or a lost trainer is still retried under max_failures -1",
          "[actors]") {
  head_state head;
  const auto id = started_forever_job(head);
  head.on_running(id, 0);
  head.on_outcome({id, 0, false, failure_cause{0, 0, "n1", "worker process 42 killed by signal 9 (SIGKILL)",
                                               failure_kind::retryable}});
  CHECK(head.find(id)->state == job_state::restarting);
  CHECK(head.schedule().size() == 1);
  head.on_trainer_lost(id, 1, "node n1 lost");
  CHECK(head.find(id)->state == job_state::restarting);
  CHECK(head.find(id)->failures.size() == 2);
}

TEST_CASE("a job the alive nodes can never hold waits PENDING saying what it needs and what the "
          "cluster has",
          "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 4}}});
  head.add_node({"n2", {{"CPU", 4}}});
  cohort::test::lr_job_options o;
  o.workers = 65536;
  auto id = submit(head, o);
  CHECK(head.schedule().empty());
  const auto* r = head.find(id);
  CHECK(r->state == job_state::pending);
  CHECK_THAT(r->reason, Catch::StartsWith("infeasible on the current cluster: needs 65536 workers, "));
  CHECK_THAT(r->reason, Catch::Contains("CPU: 65536"));
  CHECK_THAT(r->reason, Catch::Contains("has 2 alive nodes"));
  CHECK_THAT(r->reason, Catch::Contains("CPU: 8"));
}

TEST_CASE(
    "an attempt given up with a lost node does not run again when its trainer, cut off "
    "meanwhile, announces it: the job waits PENDING and starts a new attempt once placed",
    "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 1}}});
  head.add_node({"n2", {{"CPU", 1}}});
  cohort::test::lr_job_options o;
  o.strategy = "SPREAD";
  o.max_failures = -1;
  const auto id = submit(head, o);
  REQUIRE(head.schedule().size() == 1);
  REQUIRE(head.on_trainer_started(id, 0));
  head.on_running(id, 0);
  REQUIRE(head.find(id)->state == job_state::running);

  // Behind a partition: the head loses n2 (the trainer is on n1, also unreachable later).
  head.remove_node("n2");
  head.on_trainer_lost(id, 0, "node n2 was lost with ranks of the attempt");
  CHECK(head.schedule().empty());
  REQUIRE(head.find(id)->state == job_state::pending);

  // Healed: the old trainer announces attempt 0 and says all its workers run.
  CHECK_FALSE(head.on_trainer_started(id, 0));
  head.on_running(id, 0);
  CHECK(head.find(id)->state == job_state::pending);
  CHECK(head.find(id)->attempts == 1);

  head.add_node({"n2", {{"CPU", 1}}});
  REQUIRE(head.schedule().size() == 1);
  CHECK(head.find(id)->attempts == 2);
  CHECK_FALSE(head.on_trainer_started(id, 0));
  head.on_running(id, 0);
  CHECK(head.find(id)->state != job_state::running);
  CHECK(head.on_trainer_started(id, 1));
  head.on_running(id, 1);
  CHECK(head.find(id)->state == job_state::running);
  CHECK(head.find(id)->failures.size() == 1);
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

TEST_CASE("a held attempt shows in the record until rank 0 reports the release or the attempt ends",
          "[actors]") {
  head_state head;
  cohort::test::lr_job_options o;
  o.max_failures = -1;
  o.hold_before_step = 3;
  head.add_node({"n1", {{"CPU", 2}}});
  auto id = submit(head, o);
  head.schedule();
  head.on_running(id, 0);
  CHECK(head.spec(id)->run.hold_before_step == 3);
  CHECK(head.spec("job-none") == nullptr);
  auto held = rank0_report(id, 2, 40);
  held.held_before_step = 3;
  head.on_progress(held);
  CHECK(head.find(id)->held_before_step == 3);
  CHECK(head.find(id)->step == 2);
  head.on_progress(rank0_report(id, 2, 40));  // released
  CHECK(head.find(id)->held_before_step == 0);
  head.on_progress(held);
  head.on_outcome({id, 0, false, worker_failure(0, 1)});  // a restart is not held until it says so
  CHECK(head.find(id)->state == job_state::restarting);
  CHECK(head.find(id)->held_before_step == 0);
}

TEST_CASE("rank 0's evaluation reaches the job record, and later reports without one keep the newest",
          "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 2}}});
  auto id = submit(head, {});
  head.schedule();
  head.on_running(id, 0);
  head.on_progress(rank0_report(id, 1, 40));
  CHECK(head.find(id)->eval_step == 0);
  auto evaluated = rank0_report(id, 2, 40);
  evaluated.eval_step = 2;
  evaluated.eval_loss = 1.5;
  evaluated.eval_perplexity = 4.48;
  head.on_progress(evaluated);
  head.on_progress(rank0_report(id, 3, 40));
  const auto* r = head.find(id);
  CHECK(r->step == 3);
  CHECK(r->eval_step == 2);
  CHECK(r->eval_loss == 1.5);
  CHECK(r->eval_perplexity == 4.48);
  evaluated.attempt = 1;  // another attempt's (a zombie's) evaluation is not the job's
  evaluated.eval_step = 4;
  head.on_progress(evaluated);
  CHECK(head.find(id)->eval_step == 2);
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
  head.restore(r, cohort::config::parse_job_spec(r.spec_json));
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
  const auto r3 = running_record("job-0003", {"n1", "n1"}, cohort::test::linear_regression_job({}));
  head.restore(r3, cohort::config::parse_job_spec(r3.spec_json));
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
  head.restore(r, cohort::config::parse_job_spec(r.spec_json));
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

namespace {

// A 7B Llama (d 4096, 32 layers, ffn 11008, vocab 32000) on 4 GPU workers, ZeRO-3, bf16.
std::string llama_7b_job(const std::string& name, bool offload) {
  nlohmann::json spec = {
      {"name", name},
      {"model", {{"config", {{"model_type", "llama"}, {"vocab_size", 32000}, {"hidden_size", 4096},
                             {"intermediate_size", 11008}, {"num_hidden_layers", 32},
                             {"num_attention_heads", 32}, {"num_key_value_heads", 32},
                             {"max_position_embeddings", 4096}, {"tie_word_embeddings", false}}}}},
      {"data", {{"train", "data/train"}}},
      {"scaling", {{"num_workers", 4}, {"use_gpu", true}, {"resources_per_worker", {{"GPU", 1}, {"CPU", 1}}}}},
      {"train", {{"seq_len", 2048}, {"micro_batch_size", 1}, {"precision", "bf16"}}},
      {"zero", {{"stage", 3}}}};
  if (offload) spec["zero"] = {{"stage", 3}, {"offload_optimizer", "cpu"}, {"offload_param", "cpu"}};
  return spec.dump();
}

std::string submit_json(head_state& head, const std::string& json) {
  return head.submit(cohort::config::parse_job_spec(json), json);
}

constexpr std::int64_t gib24 = 24LL << 30;

// A node whose GPUs have `bytes` of memory each.
node_info gpu_memory_node(node_info node, std::int64_t bytes) {
  node.gpu_memory_bytes = bytes;
  return node;
}

}  // namespace

TEST_CASE("a job whose ranks exceed every node's GPU memory fails with the numbers", "[actors]") {
  head_state head;
  head.add_node(gpu_memory_node({"g1", {{"CPU", 16}, {"GPU", 4}, {"memory", 256e9}}}, gib24));
  const auto id = submit_json(head, llama_7b_job("big", false));
  CHECK(head.schedule().empty());
  const auto* r = head.find(id);
  CHECK(r->state == job_state::failed);
  INFO(r->reason);
  CHECK_THAT(r->reason, Catch::StartsWith("rank memory plan: ") &&
                            Catch::Contains("GiB on the GPU per rank (ZeRO-3, bf16, no offload)") &&
                            Catch::Contains("exceeds every node's GPU memory (largest: 24.0 GiB)") &&
                            Catch::Contains("zero.offload_param: \"cpu\""));
  CHECK(head.available("g1").at("GPU") == Approx(4));  // nothing reserved
}

TEST_CASE(
    "a deterministic job whose attention probabilities exceed the GPUs fails naming train.deterministic, "
    "and is placed recomputing its layers",
    "[actors]") {
  // Both offloads fit 24 GiB (the case below); torch's math path would keep 32 layers of
  // 32 x 2048² fp32 probabilities (16 GiB) more.
  auto spec = nlohmann::json::parse(llama_7b_job("exact", true));
  spec["train"]["deterministic"] = true;
  head_state head;
  head.add_node(gpu_memory_node({"g1", {{"CPU", 16}, {"GPU", 4}, {"memory", 256e9}}}, gib24));
  const auto id = submit_json(head, spec.dump());
  CHECK(head.schedule().empty());
  const auto* r = head.find(id);
  CHECK(r->state == job_state::failed);
  INFO(r->reason);
  CHECK_THAT(r->reason, Catch::Contains("exceeds every node's GPU memory (largest: 24.0 GiB)") &&
                            Catch::Contains("train.deterministic computes attention by torch's math path") &&
                            Catch::Contains("train.activation_checkpointing: true"));
  spec["name"] = "exact-recomputed";
  spec["train"]["activation_checkpointing"] = true;
  head_state recomputing;
  recomputing.add_node(gpu_memory_node({"g1", {{"CPU", 16}, {"GPU", 4}, {"memory", 256e9}}}, gib24));
  submit_json(recomputing, spec.dump());
  CHECK(recomputing.schedule().size() == 1);
}

TEST_CASE("the same job with both offloads is placed on a 24 GiB node and one with unknown GPU memory",
          "[actors]") {
  const auto gpu_memory = GENERATE(gib24, std::int64_t{0});
  head_state head;
  head.add_node(gpu_memory_node({"g1", {{"CPU", 16}, {"GPU", 4}, {"memory", 256e9}}}, gpu_memory));
  const auto id = submit_json(head, llama_7b_job("offloaded", true));
  CHECK(head.schedule().size() == 1);
  CHECK(head.find(id)->state == job_state::pending);  // starting: PENDING until running
  CHECK(head.find(id)->attempts == 1);
  if (gpu_memory == 0) {  // unknown GPU memory never refuses
    head_state plain;
    plain.add_node({"g1", {{"CPU", 16}, {"GPU", 4}}});
    submit_json(plain, llama_7b_job("big", false));
    CHECK(plain.schedule().size() == 1);
  }
}

TEST_CASE("a job that fits a busy node's memory waits PENDING instead of failing", "[actors]") {
  head_state head;
  head.add_node(gpu_memory_node({"g1", {{"CPU", 16}, {"GPU", 4}, {"memory", 256e9}}}, gib24));
  const auto first = submit_json(head, llama_7b_job("first", true));
  const auto second = submit_json(head, llama_7b_job("second", true));
  CHECK(head.schedule().size() == 1);
  CHECK(head.find(first)->attempts == 1);
  CHECK(head.find(second)->state == job_state::pending);
  CHECK(head.find(second)->attempts == 0);
  CHECK_THAT(head.find(second)->reason, Catch::StartsWith("pending: "));
  head.on_outcome({first, 0, true, {}});
  CHECK(head.schedule().size() == 1);
  CHECK(head.find(second)->attempts == 1);
}

TEST_CASE("host RAM refuses ranks no node holds and counts the ranks a node would hold", "[actors]") {
  // The reason the offloaded 7B job fails with on one 4-GPU node of `memory` bytes of RAM (a rank
  // needs about 32.5 GiB: 80 GB hold two).
  const auto refusal_on = [](double memory) {
    head_state head;
    head.add_node(gpu_memory_node({"g1", {{"CPU", 16}, {"GPU", 4}, {"memory", memory}}}, gib24));
    const auto id = submit_json(head, llama_7b_job("ram", true));
    head.schedule();
    CHECK(head.find(id)->state == job_state::failed);
    return head.find(id)->reason;
  };
  CHECK_THAT(refusal_on(16e9), Catch::Contains("GiB of host RAM per rank") &&
                                   Catch::Contains("exceeds every node's memory (largest: 14.9 GiB)"));
  CHECK_THAT(refusal_on(80e9), Catch::Contains("holds 2 of the 4 ranks"));
  // Two such nodes hold two ranks each: placement puts no more ranks on a node than its RAM
  // holds, though its four GPUs would take all four.
  head_state head;
  head.add_node(gpu_memory_node({"g1", {{"CPU", 16}, {"GPU", 4}, {"memory", 80e9}}}, gib24));
  head.add_node(gpu_memory_node({"g2", {{"CPU", 16}, {"GPU", 4}, {"memory", 80e9}}}, gib24));
  const auto id = submit_json(head, llama_7b_job("ram", true));
  REQUIRE(head.schedule().size() == 1);
  CHECK(head.find(id)->rank_nodes == std::vector<std::string>{"g1", "g1", "g2", "g2"});
  CHECK(head.available("g1").at("GPU") == Approx(2));  // the real bundles were reserved
  CHECK(head.available("g1").count("rank_host_ram") == 0);
}

TEST_CASE("an offloaded 13B fits 16 and a 70B 32 nodes of one 24 GiB GPU and 55 GB of RAM, and "
          "the 70B on 16 such nodes is refused naming its host RAM",
          "[actors]") {
  const auto add_nodes = [](head_state& head, const std::string& nodes) {
    for (const auto& n : cohort::config::load_nodes_file(COHORT_SOURCE_DIR "/examples/" + nodes)) {
      node_info info{n.name, n.resources};
      info.gpu_memory_bytes = n.gpu_memory_bytes;
      head.add_node(info);
    }
  };
  const auto plan_on = [&](const std::string& job, const std::string& nodes) {
    head_state head;
    add_nodes(head, nodes);
    return head.plan(cohort::config::load_job_spec(COHORT_SOURCE_DIR "/examples/" + job));
  };
  const auto b13 = plan_on("llama2-13b-offload-g5.json", "nodes-g5-4xlarge-16.json");
  INFO(b13.reason);
  CHECK(b13.status == cohort::core::resources::placement_status::placed);
  CHECK(b13.plan.rank_nodes.size() == 16);
  const auto b70 = plan_on("llama2-70b-offload-g5.json", "nodes-g5-4xlarge-32.json");
  INFO(b70.reason);
  CHECK(b70.status == cohort::core::resources::placement_status::placed);
  auto spec = cohort::config::load_job_spec(COHORT_SOURCE_DIR "/examples/llama2-70b-offload-g5.json");
  spec.scaling.num_workers = 16;
  head_state head;
  add_nodes(head, "nodes-g5-4xlarge-16.json");
  const auto refused = head.plan(spec);
  CHECK(refused.status == cohort::core::resources::placement_status::infeasible);
  CHECK_THAT(refused.reason, Catch::Contains("GiB of host RAM per rank") &&
                                 Catch::Contains("exceeds every node's memory (largest: 51.2 GiB)"));
}

TEST_CASE("a job whose memory plan is above its scaling.resources_per_worker.memory is refused, naming "
          "both",
          "[actors]") {
  head_state head;
  head.add_node(gpu_memory_node({"g1", {{"CPU", 16}, {"GPU", 4}, {"memory", 512e9}}}, gib24));
  auto spec = nlohmann::json::parse(llama_7b_job("held", true));
  spec["scaling"]["resources_per_worker"]["memory"] = 20e9;  // a rank needs about 32.5 GiB
  const auto id = submit_json(head, spec.dump());
  head.schedule();
  CHECK(head.find(id)->state == job_state::failed);
  CHECK_THAT(head.find(id)->reason, Catch::Contains("GiB of host RAM per rank") &&
                                        Catch::Contains("exceeds scaling.resources_per_worker.memory, 18.6 GiB"));
  spec["scaling"]["resources_per_worker"]["memory"] = 40e9;
  head_state roomy;
  roomy.add_node(gpu_memory_node({"g1", {{"CPU", 16}, {"GPU", 4}, {"memory", 512e9}}}, gib24));
  const auto fits = submit_json(roomy, spec.dump());
  REQUIRE(roomy.schedule().size() == 1);
  CHECK(roomy.find(fits)->state != job_state::failed);
}

TEST_CASE("a model that cannot be read fails the job instead of restarting it", "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 4}}});
  auto spec = nlohmann::json::parse(llama_7b_job("missing", false));
  spec["model"] = {{"hf_dir", "/nonexistent/model"}};
  spec["scaling"] = {{"num_workers", 1}};
  const auto id = submit_json(head, spec.dump());
  CHECK(head.schedule().empty());
  CHECK(head.find(id)->state == job_state::failed);
  CHECK_THAT(head.find(id)->reason, Catch::Contains("rank memory plan: model: cannot read") &&
                                        Catch::Contains("/nonexistent/model"));
  CHECK_THAT(head.plan(cohort::config::parse_job_spec(spec.dump())).reason,
             Catch::Contains("/nonexistent/model"));
}

// ---- Draining nodes and preemptions ----

namespace {

// Nodes n1, n2 and n3 with one CPU each.
void three_single_cpu_nodes(head_state& head) {
  for (const char* n : {"n1", "n2", "n3"}) head.add_node({n, {{"CPU", 1}}});
}

// A job (linear regression, two ranks, the default spec) placed on three single-CPU nodes and
// running.
std::string running_on_three_nodes(head_state& head) {
  three_single_cpu_nodes(head);
  auto id = submit(head, {});
  REQUIRE(head.schedule().size() == 1);
  head.on_running(id, 0);
  return id;
}

}  // namespace

TEST_CASE("a drained node gets no new placement until it is undrained, and says so in the node list",
          "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 1}}});
  head.add_node({"n2", {{"CPU", 1}}});
  CHECK(head.drain("n2", "drained").empty());  // no job had ranks there
  CHECK(head.drain_state("n2") == "drained");
  CHECK(head.nodes()[1].drain_state == "drained");
  CHECK(head.nodes()[0].drain_state.empty());
  auto id = submit(head, {});
  CHECK(head.schedule().empty());
  CHECK(head.find(id)->state == job_state::pending);
  // A drained node that registers again (its link came back) stays drained.
  head.add_node({"n2", {{"CPU", 1}}});
  CHECK(head.schedule().empty());
  CHECK(head.undrain("n2"));
  CHECK_FALSE(head.undrain("n2"));
  auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].rank_nodes == std::vector<std::string>{"n1", "n2"});
}

TEST_CASE("draining refuses a node that is not registered and a kind it does not know, naming them",
          "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 1}}});
  CHECK_THROWS_WITH(head.drain("n9", "drained"), Catch::Contains("no node named \"n9\" is registered (nodes: n1)"));
  CHECK_THROWS_WITH(head.drain("n1", "gone"), Catch::Contains("must be preempted or drained"));
}

TEST_CASE("a node's own preemption mark goes when it leaves, an operator's drain stays", "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 1}}});
  head.add_node({"n2", {{"CPU", 1}}});
  head.drain("n1", "preempted");
  head.drain("n2", "drained");
  head.drain("n2", "preempted");  // the node's notice does not weaken the operator's drain
  CHECK(head.drain_state("n2") == "drained");
  head.remove_node("n1");
  head.remove_node("n2");
  CHECK(head.drain_state("n1").empty());
  CHECK(head.drain_state("n2") == "drained");
}

TEST_CASE("a preempted attempt restarts on the nodes that are not draining, counted as a preemption "
          "and not as a failure",
          "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 1}}});
  head.add_node({"n2", {{"CPU", 1}}});
  auto id = submit(head, {});  // max_failures 0: one failure would end it
  REQUIRE(head.schedule().size() == 1);
  head.on_running(id, 0);
  head.add_node({"n3", {{"CPU", 1}}});
  CHECK(head.drain("n2", "preempted") == std::vector<std::string>{id});
  REQUIRE(head.begin_preemption(id, "n2", "node n2 got SIGTERM"));
  CHECK_FALSE(head.begin_preemption(id, "n2", "again"));
  CHECK(head.preempting(id));
  CHECK(head.find(id)->state == job_state::running);
  CHECK_THAT(head.find(id)->reason, Catch::StartsWith("preempting attempt 1: node n2 got SIGTERM"));

  progress_report report;
  report.job_id = id;
  report.step = 5;
  CHECK_FALSE(head.emergency_checkpoint_committed(id));
  report.checkpoint_step = 5;
  head.on_progress(report);
  CHECK(head.emergency_checkpoint_committed(id));

  const auto& r = head.on_preempted(id, 0);
  CHECK(r.state == job_state::restarting);
  CHECK(r.preemptions == 1);
  CHECK(r.failures.empty());
  CHECK_THAT(r.reason, Catch::Contains("attempt 1 preempted (node n2 got SIGTERM); emergency checkpoint at step 5"));
  CHECK_FALSE(head.preempting(id));
  auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].rank_nodes == std::vector<std::string>{"n1", "n3"});
  // The old attempt's late outcome (its workers were stopped) changes nothing.
  head.on_outcome({id, 0, false, worker_failure(0, 1)});
  CHECK(head.find(id)->failures.empty());
  CHECK(head.find(id)->attempts == 2);
}

TEST_CASE("a commit of an earlier step reported after the preemption notice is not the emergency "
          "checkpoint",
          "[actors]") {
  head_state head;
  three_single_cpu_nodes(head);
  auto id = submit(head, {});
  REQUIRE(head.schedule().size() == 1);
  head.on_running(id, 0);
  progress_report report;
  report.job_id = id;
  report.step = 6;  // step 6 ran; its checkpoint commits in the background
  report.checkpoint_step = 3;
  head.on_progress(report);
  head.drain("n2", "preempted");
  REQUIRE(head.begin_preemption(id, "n2", "node n2 got SIGTERM"));
  // Step 6's commit, reported with step 7's progress before step 7's own checkpoint commits.
  report.step = 7;
  report.checkpoint_step = 6;
  head.on_progress(report);
  CHECK_FALSE(head.emergency_checkpoint_committed(id));
  report.checkpoint_step = 7;  // the emergency checkpoint, of the step after the notice
  head.on_progress(report);
  CHECK(head.emergency_checkpoint_committed(id));
  CHECK_THAT(head.on_preempted(id, 0).reason, Catch::Contains("emergency checkpoint at step 7"));
}

TEST_CASE(
    "a preemption's deadline is the job's grace, or a cloud notice's deadline when that comes "
    "first",
    "[actors]") {
  const std::int64_t now_ms = 1'800'000'000'000;
  for (const std::int64_t notice_in_ms : {12'000, 120'000}) {
    head_state head;
    const auto id = running_on_three_nodes(head);  // run.failure.preemption_grace_s: 30 (the default)
    REQUIRE(head.begin_preemption(id, "n2", "node n2 is leaving (a notice)", now_ms, now_ms + notice_in_ms));
    if (notice_in_ms < 30'000) {
      CHECK(head.preemption_deadline_ms(id) == now_ms + notice_in_ms);
      CHECK_THAT(
          head.find(id)->reason,
          Catch::EndsWith("; saving an emergency checkpoint within 12 s (the notice's deadline, before "
                          "run.failure.preemption_grace_s 30 s)"));
    } else {  // the grace ends first
      CHECK(head.preemption_deadline_ms(id) == now_ms + 30'000);
      CHECK_THAT(head.find(id)->reason, Catch::EndsWith("; saving an emergency checkpoint within 30 s"));
    }
    head.on_preempted(id, 0);
    CHECK(head.preemption_deadline_ms(id) == 0);  // none under way
  }
}

TEST_CASE(
    "a preempted attempt whose rank 0 cannot save before the deadline is stopped at once, its "
    "numbers in the job's reason, and resumes from the last committed checkpoint",
    "[actors]") {
  head_state head;
  const auto id = running_on_three_nodes(head);
  progress_report report;
  report.job_id = id;
  report.step = 4;
  report.checkpoint_step = 4;
  head.on_progress(report);
  head.drain("n2", "preempted");
  REQUIRE(head.begin_preemption(id, "n2", "node n2 is leaving (a notice)", 1'000, 41'000));
  CHECK_FALSE(head.emergency_checkpoint_declined(id));
  const std::string why =
      "no emergency checkpoint: it would take about 100.3 s (a step of 0.2 s, then the last save's 100.1 s "
      "for 0.1 MiB on rank 1), but 30.0 s are left before the deadline (less a 5.0 s margin); the job keeps "
      "checkpoint step 4";
  report.no_emergency_save = why;
  head.on_progress(report);
  CHECK(head.emergency_checkpoint_declined(id));
  CHECK_FALSE(head.emergency_checkpoint_committed(id));
  const auto& r = head.on_preempted(id, 0);
  CHECK(r.state == job_state::restarting);
  CHECK(r.preemptions == 1);
  CHECK_THAT(r.reason, Catch::Contains("attempt 1 preempted (node n2 is leaving (a notice)); " + why +
                                       "; restarting on nodes that are not draining"));
}

TEST_CASE("a rank lost to the leaving node while its attempt is preempted blames no rank", "[actors]") {
  head_state head;
  three_single_cpu_nodes(head);
  auto id = submit(head, {});
  REQUIRE(head.schedule().size() == 1);
  head.on_running(id, 0);
  head.drain("n2", "preempted");
  REQUIRE(head.begin_preemption(id, "n2", "node n2 got SIGTERM"));
  const auto& r = head.on_outcome({id, 0, false, worker_failure(0, 1)});
  CHECK(r.state == job_state::restarting);
  CHECK(r.failures.empty());
  CHECK(r.preemptions == 1);
  CHECK_THAT(r.reason, Catch::Contains("no emergency checkpoint within run.failure.preemption_grace_s (30 s); it "
                                       "resumes from the start"));
}

TEST_CASE("max_preemptions bounds the restarts after preemptions and fails the job naming the count",
          "[actors]") {
  auto max_preemptions = GENERATE(0, 2);
  head_state head;
  three_single_cpu_nodes(head);
  cohort::test::lr_job_options o;
  o.max_preemptions = max_preemptions;
  auto id = submit(head, o);
  for (int attempt = 0; attempt <= max_preemptions; ++attempt) {
    auto starts = head.schedule();
    REQUIRE(starts.size() == 1);
    head.on_running(id, attempt);
    const auto node = starts[0].rank_nodes[1];
    REQUIRE(head.drain(node, "preempted") == std::vector<std::string>{id});
    REQUIRE(head.begin_preemption(id, node, "node " + node + " got SIGTERM"));
    head.on_preempted(id, attempt);
    head.remove_node(node);  // it left; it comes back as a new node
    head.add_node({node, {{"CPU", 1}}});
  }
  const auto* r = head.find(id);
  CHECK(r->state == job_state::failed);
  CHECK(r->preemptions == max_preemptions + 1);
  CHECK(r->failures.empty());
  CHECK_THAT(r->reason, Catch::Contains("preempted " + std::to_string(max_preemptions + 1) +
                                        " times (failure.max_preemptions=" +
                                        std::to_string(max_preemptions) + " exhausted)"));
  CHECK(head.schedule().empty());
}

TEST_CASE("a job with no attempt placed is not preempted", "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 1}}});
  auto id = submit(head, {});  // needs two CPUs: PENDING
  CHECK(head.schedule().empty());
  CHECK(head.drain("n1", "drained").empty());
  CHECK_FALSE(head.begin_preemption(id, "n1", "drained"));
  CHECK(head.find(id)->preemptions == 0);
}

// ---- Elastic jobs (scaling.min_workers) ----

namespace {

// A linear-regression job of `workers` ranks (one CPU each) with scaling.min_workers `least`,
// restarted forever.
std::string elastic_job(head_state& head, int workers, int least) {
  cohort::test::lr_job_options o;
  o.workers = workers;
  o.max_failures = -1;
  auto spec = nlohmann::json::parse(cohort::test::linear_regression_job(o));
  spec["scaling"]["min_workers"] = least;
  const auto text = spec.dump();
  return head.submit(cohort::config::parse_job_spec(text), text);
}

}  // namespace

TEST_CASE("an elastic job starts on fewer workers with more accumulation and grows back at its next "
          "restart",
          "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 3}}});
  const auto id = elastic_job(head, 4, 2);
  auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  // 3 ranks would not divide the 4 micro-batches of a step: 2 ranks accumulating 2 each.
  CHECK(starts[0].rank_nodes.size() == 2);
  const auto& shrunk = starts[0].spec;
  CHECK(shrunk.scaling.num_workers == 2);
  CHECK(shrunk.train.grad_accum == 2);
  CHECK(cohort::config::global_batch(shrunk) == cohort::config::global_batch(*head.spec(id)));
  CHECK_THAT(head.find(id)->reason, Catch::Contains("on 2 of 4 workers (scaling.min_workers 2; "
                                                    "train.grad_accum 2 keeps the global batch)"));
  head.on_running(id, 0);
  CHECK_THAT(head.find(id)->reason, Catch::Contains("all 2 workers running"));
  CHECK(free_cpu(head, "n1") == Approx(1));

  head.add_node({"n2", {{"CPU", 1}}});
  head.on_outcome({id, 0, false, worker_failure(0, 1)});
  starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].rank_nodes.size() == 4);
  CHECK(starts[0].spec.scaling.num_workers == 4);
  CHECK(starts[0].spec.train.grad_accum == 1);
}

TEST_CASE("a job without min_workers, or with fewer room than min_workers, waits PENDING", "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 1}}});
  const auto strict = elastic_job(head, 2, 0);
  const auto elastic = elastic_job(head, 4, 2);
  CHECK(head.schedule().empty());
  CHECK(head.find(strict)->state == job_state::pending);
  CHECK(head.find(elastic)->state == job_state::pending);
}

TEST_CASE("a restored RUNNING elastic attempt on fewer workers keeps its placement for adoption",
          "[actors]") {
  head_state head;
  cohort::test::lr_job_options o;
  o.workers = 4;
  auto spec = nlohmann::json::parse(cohort::test::linear_regression_job(o));
  spec["scaling"]["min_workers"] = 2;
  head.restore(running_record("job-0001", {"n1", "n1"}, spec.dump()), cohort::config::parse_job_spec(spec.dump()));
  head.add_node({"n1", {{"CPU", 4}}});  // its node comes back: the attempt's 2 ranks stay reserved
  CHECK(head.awaiting_adoption() == std::vector<std::string>{"job-0001"});
  CHECK(free_cpu(head, "n1") == Approx(2));
  CHECK(head.on_trainer_started("job-0001", 0));
}

// ---- Elastic jobs growing back by themselves (scaling.resize_interval_s) ----

namespace {

// A tiny-Llama job of 2 ranks (one CPU each) accumulating 2 micro-batches each, with
// scaling.min_workers 1 and resize_interval_s 60, restarted forever.
std::string growing_job(head_state& head, const std::string& workload = "causal_lm") {
  nlohmann::json spec = {
      {"name", "grows"},
      {"workload", workload},
      {"scaling",
       {{"num_workers", 2},
        {"min_workers", 1},
        {"resize_interval_s", 60},
        {"resources_per_worker", {{"CPU", 1}}}}},
      {"train", {{"seq_len", 16}, {"micro_batch_size", 2}, {"grad_accum", 2}, {"max_steps", 24}}},
      {"run", {{"failure", {{"max_failures", -1}}}}}};
  if (workload == "causal_lm") {
    spec["model"] = {{"config", nlohmann::json::parse(cohort::test::tiny_llama_config())}};
    spec["data"] = {{"train", "/data/none"}};
  }
  const auto text = spec.dump();
  return head.submit(cohort::config::parse_job_spec(text), text);
}

// The job's attempt `attempt` reports `step` with `checkpoint` its newest committed checkpoint.
progress_report step_report(const std::string& id, std::int32_t attempt, std::int64_t step,
                            std::int64_t checkpoint) {
  auto r = rank0_report(id, step, 24);
  r.attempt = attempt;
  r.checkpoint_step = checkpoint;
  return r;
}

// A growing job started on node n1 (one CPU: one rank) whose attempt has run since 1000 ms.
std::string shrunk_on_n1(head_state& head) {
  head.add_node({"n1", {{"CPU", 1}}});
  const auto id = growing_job(head);
  const auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  REQUIRE(starts[0].rank_nodes == std::vector<std::string>{"n1"});
  head.on_running(id, 0, 1000);
  return id;
}

}  // namespace

TEST_CASE(
    "an elastic job on fewer workers grows once a node joins and its resize interval has passed, "
    "stopping at a checkpoint newer than the last it reported, and counted as neither failure "
    "nor preemption",
    "[actors]") {
  head_state head;
  const auto id = shrunk_on_n1(head);
  CHECK(head.resize_due_ms(id) == 61000);
  CHECK(head.growable(100000).empty());  // no room for a second rank
  head.add_node({"n2", {{"CPU", 1}}});
  CHECK(head.growable(60999).empty());  // the interval is not over
  const auto grow = head.growable(61000);
  REQUIRE(grow.size() == 1);
  CHECK(grow[0].job_id == id);
  CHECK(grow[0].from == 1);
  CHECK(grow[0].to == 2);

  head.on_progress(step_report(id, 0, 5, 4));
  REQUIRE(head.begin_resize(id, 2));
  CHECK(head.resizing(id));
  CHECK_FALSE(head.begin_resize(id, 2));  // one resize at a time
  CHECK(head.growable(100000).empty());
  CHECK(head.find(id)->state == job_state::running);
  CHECK_THAT(head.find(id)->reason,
             Catch::StartsWith("growing from 1 to 2 workers: attempt 1 saves a checkpoint"));
  // Step 4's checkpoint was known before; step 6's is the resize's.
  head.on_progress(step_report(id, 0, 6, 4));
  CHECK_FALSE(head.resize_checkpoint_committed(id));
  head.on_progress(step_report(id, 0, 6, 6));
  CHECK(head.resize_checkpoint_committed(id));

  const auto& r = head.on_resized(id, 0);
  CHECK(r.state == job_state::restarting);
  CHECK(r.preemptions == 0);
  CHECK(r.failures.empty());
  CHECK_THAT(r.reason, Catch::Contains("attempt 1 stopped to grow from 1 to 2 workers (checkpoint at step 6; "
                                       "neither a failure nor a preemption)"));
  CHECK_FALSE(head.resizing(id));
  const auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].rank_nodes == std::vector<std::string>{"n1", "n2"});
  CHECK(starts[0].spec.scaling.num_workers == 2);
  CHECK(starts[0].spec.train.grad_accum == 2);
  CHECK(head.find(id)->attempts == 2);
}

namespace {

// What the store keeps of the job (state.json: the record's JSON view without the spec), restored
// by a head that takes over with the job's node registered again.
head_state taken_over(const head_state& before, const std::string& id, const std::vector<node_info>& nodes) {
  auto record = cohort::net::from_json_view<job_record>(cohort::net::to_json_view(*before.find(id)));
  head_state after;
  after.restore(record, *before.spec(id));
  for (const auto& n : nodes) after.add_node(n);
  REQUIRE(after.awaiting_adoption() == std::vector<std::string>{id});
  REQUIRE(after.on_trainer_started(id, 0));
  return after;
}

}  // namespace

TEST_CASE(
    "a resize in progress is kept in the job record, and a head that takes over ends the "
    "adopted attempt as a resize once its checkpoint commits, counting it as one",
    "[actors]") {
  head_state head;
  const auto id = shrunk_on_n1(head);
  head.add_node({"n2", {{"CPU", 1}}});
  head.on_progress(step_report(id, 0, 5, 4));
  REQUIRE(head.begin_resize(id, 2));
  CHECK(head.find(id)->phase == "resizing");
  CHECK(head.find(id)->phase_to == 2);
  CHECK(head.find(id)->phase_checkpoint_before == 5);

  auto next = taken_over(head, id, {{"n1", {{"CPU", 1}}}, {"n2", {{"CPU", 1}}}});
  CHECK(next.resizing(id));
  CHECK(next.growable(1'000'000).empty());     // one resize at a time, here too
  next.on_progress(step_report(id, 0, 5, 4));  // the adopted trainer's last report again
  CHECK_FALSE(next.resize_checkpoint_committed(id));
  next.on_progress(step_report(id, 0, 6, 6));
  REQUIRE(next.resize_checkpoint_committed(id));
  const auto& r = next.on_resized(id, 0);
  CHECK(r.state == job_state::restarting);
  CHECK(r.failures.empty());
  CHECK(r.preemptions == 0);
  CHECK(r.resizes == 1);
  CHECK(r.phase.empty());
  CHECK(r.phase_to == 0);
  const auto starts = next.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].rank_nodes == std::vector<std::string>{"n1", "n2"});
}

TEST_CASE(
    "a preemption in progress is kept in the job record, and a head that takes over keeps "
    "its deadline and counts the adopted attempt's end as a preemption",
    "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 1}}});
  head.add_node({"n2", {{"CPU", 1}}});
  auto id = submit(head, {});  // max_failures 0: one failure would end it
  REQUIRE(head.schedule().size() == 1);
  head.on_running(id, 0);
  head.drain("n2", "preempted");
  REQUIRE(head.begin_preemption(id, "n2", "node n2 got SIGTERM", 1'000, 41'000));
  CHECK(head.find(id)->phase == "preempting");
  CHECK(head.find(id)->phase_deadline_ms == 31'000);  // the grace (30 s) ends first
  CHECK(head.find(id)->phase_node == "n2");

  auto next = taken_over(head, id, {{"n1", {{"CPU", 1}}}, {"n2", {{"CPU", 1}}}, {"n3", {{"CPU", 1}}}});
  CHECK(next.preempting(id));
  CHECK(next.preemption_deadline_ms(id) == 31'000);
  progress_report report;
  report.job_id = id;
  report.step = 5;
  report.checkpoint_step = 5;
  next.on_progress(report);
  REQUIRE(next.emergency_checkpoint_committed(id));
  const auto& r = next.on_preempted(id, 0);
  CHECK(r.state == job_state::restarting);
  CHECK(r.preemptions == 1);
  CHECK(r.failures.empty());
  CHECK_THAT(r.reason,
             Catch::Contains("attempt 1 preempted (node n2 got SIGTERM); emergency checkpoint at step 5"));
  CHECK(r.phase.empty());
  CHECK(r.phase_deadline_ms == 0);
}

TEST_CASE("a restored attempt that cannot be adopted leaves no phase behind", "[actors]") {
  head_state head;
  const auto id = shrunk_on_n1(head);
  head.add_node({"n2", {{"CPU", 1}}});
  REQUIRE(head.begin_resize(id, 2));
  auto record = *head.find(id);
  record.rank_nodes = {"n1", "n1", "n1"};  // more ranks than the spec's num_workers: not adoptable
  head_state next;
  next.restore(record, *head.spec(id));
  CHECK(next.awaiting_adoption().empty());
  CHECK_FALSE(next.resizing(id));
  CHECK(next.find(id)->phase.empty());
}

TEST_CASE("a job that is not elastic, already on all its workers, or saving no checkpoints never grows",
          "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 2}}});
  const auto full = growing_job(head);  // both ranks on n1
  head.add_node({"n2", {{"CPU", 1}}});
  const auto lr = growing_job(head, "linear_regression");  // one rank on n2
  cohort::test::lr_job_options o;
  o.workers = 1;
  const auto strict = submit(head, o);  // not elastic: waits for room
  REQUIRE(head.schedule().size() == 2);
  head.on_running(full, 0, 0);
  head.on_running(lr, 0, 0);
  CHECK(head.find(lr)->rank_nodes.size() == 1);
  head.add_node({"n3", {{"CPU", 4}}});
  REQUIRE(head.schedule().size() == 1);  // the strict job
  head.on_running(strict, 0, 0);
  CHECK(head.growable(1000000).empty());
}

TEST_CASE(
    "an elastic job does not grow while a job submitted before it waits for placement, which "
    "would take the room its restart gives back",
    "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 2}}});
  cohort::test::lr_job_options o;
  o.workers = 1;
  const auto first = submit(head, o);
  const auto id = growing_job(head);
  REQUIRE(head.schedule().size() == 2);  // first on one CPU, the elastic job on the other
  head.on_running(id, 0, 0);
  head.on_outcome({first, 0, false, worker_failure(0, 0)});  // max_failures 0: FAILED, room freed
  const auto waiting = submit(head, {});                     // two CPUs, submitted after the elastic job
  CHECK(head.schedule().empty());
  REQUIRE(head.growable(1000000).size() == 1);  // the later job waits behind it
  head.stop(waiting, "stopped");

  head_state other;
  other.add_node({"n1", {{"CPU", 1}}});
  const auto big = submit(other, {});  // two CPUs: waits
  const auto grows = growing_job(other);
  CHECK(other.schedule().size() == 1);
  other.on_running(grows, 0, 0);
  other.add_node({"n2", {{"CPU", 1}}});
  CHECK(other.schedule().size() == 0);  // the elastic job holds n1: big still waits
  CHECK(other.find(big)->state == job_state::pending);
  CHECK(other.growable(1000000).empty());
}

TEST_CASE("an attempt being preempted does not grow, and a preemption during a resize takes it over",
          "[actors]") {
  head_state head;
  const auto id = shrunk_on_n1(head);
  head.add_node({"n2", {{"CPU", 1}}});
  head.add_node({"n3", {{"CPU", 1}}});

  SECTION("preempted first: no resize") {
    head.drain("n1", "preempted");
    REQUIRE(head.begin_preemption(id, "n1", "node n1 got SIGTERM"));
    CHECK(head.growable(100000).empty());
    CHECK_FALSE(head.begin_resize(id, 2));
    CHECK(head.on_preempted(id, 0).preemptions == 1);
  }
  SECTION("resizing first: the preemption counts, the resize is over") {
    REQUIRE(head.begin_resize(id, 2));
    head.drain("n1", "preempted");
    REQUIRE(head.begin_preemption(id, "n1", "node n1 got SIGTERM"));
    CHECK_FALSE(head.resizing(id));
    head.on_progress(step_report(id, 0, 3, 3));
    CHECK_FALSE(head.resize_checkpoint_committed(id));
    CHECK(head.emergency_checkpoint_committed(id));
    const auto& r = head.on_preempted(id, 0);
    CHECK(r.preemptions == 1);
    CHECK(head.on_resized(id, 0).state == job_state::restarting);  // nothing more to end
  }
  const auto starts = head.schedule();
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].rank_nodes == std::vector<std::string>{"n2", "n3"});
}

TEST_CASE(
    "a growing attempt that ends on its own ends as it would have, and a grown job whose new "
    "node left before its restart runs on what is left",
    "[actors]") {
  head_state head;
  const auto id = shrunk_on_n1(head);
  head.add_node({"n2", {{"CPU", 1}}});
  REQUIRE(head.begin_resize(id, 2));

  SECTION("it reached its last step") {
    CHECK(head.on_outcome({id, 0, true, {}}).state == job_state::succeeded);
    CHECK_FALSE(head.resizing(id));
  }
  SECTION("a rank failed: a failure") {
    const auto& r = head.on_outcome({id, 0, false, worker_failure(0, 0)});
    CHECK(r.state == job_state::restarting);
    CHECK(r.failures.size() == 1);
    CHECK_FALSE(head.resizing(id));
  }
  SECTION("stopped to grow, and n2 is gone before the restart") {
    head.on_resized(id, 0);
    head.remove_node("n2");
    const auto starts = head.schedule();
    REQUIRE(starts.size() == 1);
    CHECK(starts[0].rank_nodes == std::vector<std::string>{"n1"});
    CHECK(starts[0].spec.train.grad_accum == 4);
  }
}

TEST_CASE("the head persists a job record again when a persisted field changes, and not for progress "
          "alone",
          "[actors]") {
  using cohort::actors::persisted_job_fields;
  job_record r;
  r.id = "job-1";
  r.state = job_state::running;
  r.reason = "x|1";
  r.attempts = 2;
  r.trainer_node = "n";
  const auto before = persisted_job_fields::of(r);
  auto progressed = r;
  progressed.step = 9;
  progressed.loss = 0.5;
  progressed.checkpoint_step = 8;
  CHECK(persisted_job_fields::of(progressed) == before);
  auto changed = r;
  changed.preemptions = 1;
  CHECK(persisted_job_fields::of(changed) != before);
  changed = r;
  changed.state = job_state::restarting;
  CHECK(persisted_job_fields::of(changed) != before);
  // Fields compared one by one: a reason holding the separator of a joined key cannot make two
  // records look the same ("x|1", 2, "n" and "x", 1, "2|n" joined the same way).
  changed = r;
  changed.reason = "x";
  changed.attempts = 1;
  changed.trainer_node = "2|n";
  CHECK(persisted_job_fields::of(changed) != before);
}

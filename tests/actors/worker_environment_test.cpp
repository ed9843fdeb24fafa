// What a node puts into a worker process's environment: CUDA_VISIBLE_DEVICES from the head's GPU
// assignment (by the node's ids for its GPUs), the job's runtime_env.env_vars, and the setup.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "actors/worker_process_link.hpp"
#include "tests/actors/job_specs.hpp"
#include "tests/support/scoped_env.hpp"

using namespace cohort::actors;

namespace {

worker_setup setup_with(std::vector<std::int32_t> gpus, const nlohmann::json& env_vars = {}) {
  auto spec = nlohmann::json::parse(cohort::test::linear_regression_job({}));
  if (!env_vars.is_null()) spec["runtime_env"]["env_vars"] = env_vars;
  worker_setup s;
  s.job_id = "job-0001";
  s.spec = cohort::config::parse_job_spec(spec.dump());
  s.rank = 1;
  s.world_size = 2;
  s.node = "n1";
  s.gpus = std::move(gpus);
  s.store_secret = std::string(64, 'c');  // what the trainer sends: 64 hex digits
  return s;
}

const std::vector<std::string> node_ids{"GPU-aaaa", "GPU-bbbb", "GPU-cccc"};

}  // namespace

TEST_CASE("a worker's CUDA_VISIBLE_DEVICES names the GPUs assigned to it by the node's ids",
          "[actors]") {
  auto env = worker_environment(setup_with({2, 0}), "/tmp/setup", node_ids, 3);
  CHECK(env.at("CUDA_VISIBLE_DEVICES") == "GPU-cccc,GPU-aaaa");
  CHECK(env.at(worker_setup_file_variable) == "/tmp/setup");
}

TEST_CASE("the store secret reaches a worker process in its private setup file, never in its environment",
          "[actors][security]") {
  const auto setup = setup_with({});
  for (const auto& [name, value] : worker_environment(setup, "/tmp/setup", node_ids, 3)) {
    INFO(name);
    CHECK(value.find(setup.store_secret) == std::string::npos);
  }
  worker_setup_file file(setup);
  const auto back = [&] {
    const cohort::test::scoped_env pointed(worker_setup_file_variable, file.path());
    return read_worker_setup();
  }();
  CHECK(back.store_secret == setup.store_secret);
  CHECK(worker_context_for(back).store_secret == std::string(32, '\xcc'));
  auto bad = setup;
  bad.store_secret = "not hex";
  CHECK_THROWS_WITH(worker_context_for(bad), Catch::Contains("store secret must be 64 hex digits") &&
                                                 Catch::Contains("rank 1 of job job-0001") &&
                                                 !Catch::Contains("not hex"));
}

TEST_CASE("a worker without GPUs gets an empty CUDA_VISIBLE_DEVICES", "[actors]") {
  auto env = worker_environment(setup_with({}), "/tmp/setup", node_ids, 3);
  CHECK(env.at("CUDA_VISIBLE_DEVICES").empty());
}

TEST_CASE("GPUs the node has no id for are named by their index", "[actors]") {
  auto env = worker_environment(setup_with({1}), "/tmp/setup", {}, 2);
  CHECK(env.at("CUDA_VISIBLE_DEVICES") == "1");
}

TEST_CASE("an assigned GPU index the node does not offer is an error naming both", "[actors]") {
  CHECK_THROWS_WITH(worker_environment(setup_with({3}), "/tmp/setup", node_ids, 3),
                    Catch::Contains("was assigned GPU index 3 but node n1 offers 3 GPUs"));
}

TEST_CASE("the job's runtime_env.env_vars are in the worker's environment", "[actors]") {
  auto env = worker_environment(setup_with({}, {{"NCCL_DEBUG", "INFO"}, {"HF_HOME", "/hf"}}), "/tmp/setup",
                                node_ids, 3);
  CHECK(env.at("NCCL_DEBUG") == "INFO");
  CHECK(env.at("HF_HOME") == "/hf");
  CHECK(env.count(worker_setup_file_variable) == 1);
  CHECK(env.size() == 4);
}

TEST_CASE("a setup file of a spec larger than an environment variable holds is private, read back "
          "whole and removed",
          "[actors]") {
  auto setup = setup_with({1});
  setup.spec.model.inline_config_json =
      nlohmann::json{{"note", std::string(300 * 1024, 'x')}}.dump();  // 300 KiB > 128 KiB
  std::string path;
  {
    worker_setup_file file(setup);
    path = file.path();
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    const auto back = [&] {
      const cohort::test::scoped_env pointed(worker_setup_file_variable, path);
      return read_worker_setup();
    }();
    CHECK(cohort::config::to_json_text(back.spec) == cohort::config::to_json_text(setup.spec));
    CHECK(back.gpus == std::vector<std::int32_t>{1});
    CHECK(::access(path.c_str(), F_OK) != 0);  // the worker removed it once read
  }
  CHECK(::access(path.c_str(), F_OK) != 0);
}

TEST_CASE("the node removes a setup file its worker never read", "[actors]") {
  std::string path;
  {
    worker_setup_file file(setup_with({}));
    path = file.path();
    CHECK(::access(path.c_str(), F_OK) == 0);
  }
  CHECK(::access(path.c_str(), F_OK) != 0);
}

TEST_CASE("a setup whose number no integer field holds is refused, not cast", "[actors]") {
  // Found by fuzz_worker_link.
  auto view = nlohmann::json::parse(worker_setup_to_json(setup_with({})));
  view["rank"] = 2.5e12;
  CHECK_THROWS_WITH(cohort::actors::worker_setup_from_json(view.dump()),
                    Catch::Contains("worker_setup.rank: expected an integer"));
}

// runtime_env.env_vars: what a job may put into its worker processes' environment, and what is
// refused at parse time (names that change the code a process loads, the GPU assignment,
// cohort's own variables), each refusal naming the variable's JSON path and what is allowed.
#include <catch2/catch.hpp>

#include "config/job_spec.hpp"
#include "tests/config/spec_test_support.hpp"

using namespace cohort::config;
using cohort::config::testing::expect_spec_error;
using cohort::config::testing::patched_spec;

namespace {

spec_error refusal_of(const std::string& name, const std::string& value = "x") {
  return expect_spec_error([&] {
    parse_job_spec(patched_spec(R"({"runtime_env": {"env_vars": {")" + name + R"(": ")" + value +
                                R"("}}})"));
  });
}

}  // namespace

TEST_CASE("runtime_env.env_vars reach the spec and survive its canonical JSON", "[config]") {
  auto spec = parse_job_spec(patched_spec(
      R"({"runtime_env": {"env_vars": {"NCCL_DEBUG": "INFO", "HF_HOME": "/data/hf",
                                       "COHORT_GPU_MEMORY_LIMIT_GB": "20.5", "EMPTY": ""}}})"));
  const std::map<std::string, std::string> expected{{"NCCL_DEBUG", "INFO"},
                                                    {"HF_HOME", "/data/hf"},
                                                    {"COHORT_GPU_MEMORY_LIMIT_GB", "20.5"},
                                                    {"EMPTY", ""}};
  CHECK(spec.runtime_env.env_vars == expected);
  CHECK(parse_job_spec(to_json_text(spec)).runtime_env.env_vars == expected);
  CHECK(parse_job_spec(patched_spec("{}")).runtime_env.env_vars.empty());
}

TEST_CASE("variables that change what code a worker loads are refused, naming the field and the "
          "rules", "[config]") {
  const char* names[] = {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PATH", "PYTHONPATH",
                         "PYTHONSTARTUP", "PERL5LIB", "BASH_ENV", "ENV", "IFS", "SHELLOPTS",
                         "GCONV_PATH", "MALLOC_CHECK_", "GLIBC_TUNABLES", "NCCL_NET_PLUGIN",
                         "CUDA_INJECTION64_PATH", "NODE_OPTIONS"};
  for (const char* name : names) {
    INFO(name);
    const auto e = refusal_of(name);
    CHECK(e.path() == std::string("runtime_env.env_vars.") + name);
    CHECK_THAT(e.what(), Catch::Contains("could change what code the worker process loads"));
    CHECK_THAT(e.what(), Catch::Contains("Allowed: variable names from [A-Za-z0-9_]"));
  }
}

TEST_CASE("the GPU assignment and cohort's own variables cannot be set by a job", "[config]") {
  auto cuda = refusal_of("CUDA_VISIBLE_DEVICES", "0");
  CHECK(cuda.path() == "runtime_env.env_vars.CUDA_VISIBLE_DEVICES");
  CHECK_THAT(cuda.what(), Catch::Contains("the head assigns each worker its GPUs"));
  auto own = refusal_of("COHORT_WORKER_SETUP");
  CHECK_THAT(own.what(), Catch::Contains("the only COHORT_ variable a job may set is "
                                         "COHORT_GPU_MEMORY_LIMIT_GB"));
}

TEST_CASE("COHORT_GPU_MEMORY_LIMIT_GB must be a positive number", "[config]") {
  for (const char* bad : {"0", "-3", "lots", "", "20GB", "nan"}) {
    INFO(bad);
    const auto e = refusal_of("COHORT_GPU_MEMORY_LIMIT_GB", bad);
    CHECK(e.path() == "runtime_env.env_vars.COHORT_GPU_MEMORY_LIMIT_GB");
    CHECK_THAT(e.what(), Catch::Contains("a number of GiB > 0"));
  }
}

TEST_CASE("env_vars names must be identifiers and values strings of bounded size", "[config]") {
  for (const char* bad : {"1ABC", "A-B", "A B", "A=B"}) {
    INFO(bad);
    CHECK_THAT(refusal_of(bad).what(), Catch::Contains("is not a valid variable name"));
  }
  auto number = expect_spec_error(
      [] { parse_job_spec(patched_spec(R"({"runtime_env": {"env_vars": {"N": 3}}})")); });
  CHECK(number.path() == "runtime_env.env_vars.N");
  auto huge = refusal_of("BIG", std::string(max_env_var_bytes + 1, 'x'));
  CHECK_THAT(huge.what(), Catch::Contains("at most 4096 bytes"));
  std::string many;
  for (std::size_t i = 0; i <= max_env_vars; ++i)
    many += (many.empty() ? "" : ", ") + std::string("\"V") + std::to_string(i) + "\": \"1\"";
  auto too_many = expect_spec_error(
      [&] { parse_job_spec(patched_spec(R"({"runtime_env": {"env_vars": {)" + many + "}}}")); });
  CHECK(too_many.path() == "runtime_env.env_vars");
  CHECK_THAT(too_many.what(), Catch::Contains("at most 64"));
  auto unknown = expect_spec_error(
      [] { parse_job_spec(patched_spec(R"({"runtime_env": {"pip": ["torch"]}})")); });
  CHECK_THAT(unknown.path(), Catch::StartsWith("runtime_env"));
}

TEST_CASE("GPU counts above one must be whole, and the trainer takes no GPU", "[config]") {
  auto fractional = expect_spec_error([] {
    parse_job_spec(patched_spec(
        R"({"scaling": {"use_gpu": true, "resources_per_worker": {"CPU": 1, "GPU": 1.5}}})"));
  });
  CHECK(fractional.path() == "scaling.resources_per_worker.GPU");
  CHECK_THAT(fractional.what(), Catch::Contains("a whole number of GPUs"));
  auto half = parse_job_spec(patched_spec(
      R"({"scaling": {"use_gpu": true, "resources_per_worker": {"CPU": 1, "GPU": 0.5}}})"));
  CHECK(half.scaling.resources_per_worker.at("GPU") == Approx(0.5));
  auto trainer = expect_spec_error([] {
    parse_job_spec(patched_spec(R"({"scaling": {"use_gpu": true, "trainer_resources": {"GPU": 1}}})"));
  });
  CHECK(trainer.path() == "scaling.trainer_resources.GPU");
}

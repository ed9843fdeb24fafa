// Limits every job spec is held to: its size, how deeply its JSON nests, and the per-rank sizes
// whose absurd values would otherwise be accepted and fail on every attempt.
#include <catch2/catch.hpp>

#include <string>

#include "config/job_spec.hpp"
#include "tests/config/spec_test_support.hpp"

using namespace cohort::config;
using cohort::config::testing::expect_spec_error;
using cohort::config::testing::patched_spec;

TEST_CASE("a spec nested deeper than the limit is refused naming the limit, even 200000 deep",
          "[config]") {
  const std::string deep(200000, '[');
  const spec_error e = expect_spec_error([&] { parse_job_spec(deep); });
  CHECK_THAT(e.what(), Catch::Contains("deeper than the limit of 64 levels"));
  CHECK(e.path().empty());
}

TEST_CASE("model.config nested 1000 deep is refused, 60 deep is accepted", "[config]") {
  const auto nested = [](int depth) {
    return R"({"model": {"hf_dir": null, "config": {"x": )" + std::string(depth, '[') + std::string(depth, ']') + "}}}";
  };
  const spec_error e = expect_spec_error([&] { parse_job_spec(patched_spec(nested(1000))); });
  CHECK_THAT(e.what(), Catch::Contains("the limit of 64 levels"));
  CHECK_NOTHROW(parse_job_spec(patched_spec(nested(60))));
}

TEST_CASE("brackets inside strings do not count towards the nesting limit", "[config]") {
  const std::string text = R"({"name": "n", "note": ")" + std::string(500, '[') + R"(\"["})";
  const spec_error e = expect_spec_error([&] { parse_job_spec(text); });
  CHECK_THAT(e.what(), Catch::Contains("note"));  // the unknown key, not the depth
  CHECK_THAT(e.what(), !Catch::Contains("levels"));
}

TEST_CASE("a spec over 1 MiB is refused naming the limit", "[config]") {
  const std::string big = patched_spec(R"({"model": {"hf_dir": null, "config": {"note": ")" +
                                       std::string(max_spec_bytes, 'x') + R"("}}})");
  const spec_error e = expect_spec_error([&] { parse_job_spec(big); });
  CHECK_THAT(e.what(), Catch::Contains("the limit is 1048576 bytes (1 MiB)"));
  CHECK_NOTHROW(parse_job_spec(patched_spec(R"({"model": {"hf_dir": null, "config": {"note": ")" +
                                            std::string(200 * 1024, 'x') + R"("}}})")));
}

TEST_CASE("train.micro_batch_size above 65536 is refused naming the field and the bound",
          "[config]") {
  const spec_error e = expect_spec_error(
      [] { parse_job_spec(patched_spec(R"({"train": {"micro_batch_size": 2147483647}})")); });
  CHECK(e.path() == "train.micro_batch_size");
  CHECK_THAT(e.what(), Catch::Contains("2147483647"));
  CHECK_THAT(e.what(), Catch::Contains("an integer in [1, 65536]"));
  CHECK(parse_job_spec(patched_spec(R"({"train": {"micro_batch_size": 65536}})")).train.micro_batch_size ==
        65536);
}

TEST_CASE("train.grad_accum and train.seq_len are bounded, and so is the DeepSpeed micro-batch",
          "[config]") {
  const auto refusal = [](const std::string& patch) -> std::string {
    return expect_spec_error([&] { parse_job_spec(patched_spec(patch)); }).what();
  };
  CHECK_THAT(refusal(R"({"train": {"grad_accum": 65537}})"),
             Catch::StartsWith("train.grad_accum: ") && Catch::Contains("[1, 65536]"));
  CHECK_THAT(refusal(R"({"train": {"seq_len": 1048577}})"),
             Catch::StartsWith("train.seq_len: ") && Catch::Contains("[1, 1048576]"));
  CHECK_THAT(refusal(R"({"deepspeed": {"train_micro_batch_size_per_gpu": 100000}})"),
             Catch::Contains("train_micro_batch_size_per_gpu") && Catch::Contains("[1, 65536]"));
}

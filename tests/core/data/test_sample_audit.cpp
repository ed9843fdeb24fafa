// The sample-log audit: surviving lines replayed against the sampler.
#include <catch2/catch.hpp>

#include "core/data/sample_audit.hpp"
#include "tests/support/files.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::data;

namespace {

const batch_geometry geometry{2, 2, 2};  // 8 samples a step
constexpr std::int64_t samples = 40;     // 5 steps an epoch
constexpr std::uint64_t seed = 9;

// What rank r logs for steps [from, to] in `attempt`, straight from the sampler.
void log_steps(std::vector<std::vector<sample_log_line>>& logs, int attempt, std::int64_t from, std::int64_t to) {
  const sampler s(samples, geometry.global_batch(), seed);
  for (std::int64_t k = from; k <= to; ++k)
    for (int r = 0; r < 2; ++r) logs[r].push_back({attempt, k, s.rank_samples(k - 1, geometry, r)});
}

}  // namespace

TEST_CASE("a sample log whose restarted attempts redo the steps after their checkpoint passes the audit",
          "[core][data]") {
  std::vector<std::vector<sample_log_line>> logs(2);
  log_steps(logs, 0, 1, 7);   // dies after step 7
  log_steps(logs, 1, 7, 8);   // resumed after step 6, dies after step 8
  log_steps(logs, 2, 7, 10);  // resumed after step 6 again
  const auto a = audit_sample_logs(logs, samples, geometry, seed, 10);
  INFO((a.errors.empty() ? "" : a.errors.front()));
  CHECK(a.ok());
  CHECK(a.lines == 2 * (7 + 2 + 4));
  CHECK(a.replaced == 2 * (1 + 2));
  REQUIRE(a.resumes.size() == 2);
  CHECK(a.resumes[0] == std::vector<std::pair<int, std::int64_t>>{{0, 0}, {1, 6}, {2, 6}});
}

TEST_CASE("the sample audit names a missing step, a wrong sample and a sample consumed twice in an epoch",
          "[core][data]") {
  std::vector<std::vector<sample_log_line>> logs(2);
  SECTION("a step missing") {
    log_steps(logs, 0, 1, 3);
    log_steps(logs, 1, 5, 5);
    const auto a = audit_sample_logs(logs, samples, geometry, seed, 5);
    CHECK_FALSE(a.ok());
    CHECK_THAT(a.errors.front(), Catch::Contains("rank 0: step 4 is missing"));
  }
  SECTION("a sample that is not the sampler's, seen twice") {
    log_steps(logs, 0, 1, 5);
    logs[1][2].samples[0] = logs[0][0].samples[0];
    const auto a = audit_sample_logs(logs, samples, geometry, seed, 5);
    CHECK_FALSE(a.ok());
    CHECK_THAT(a.errors.front(), Catch::Contains("rank 1, step 3 (attempt 0): consumed ["));
    CHECK(std::any_of(a.errors.begin(), a.errors.end(), [](const std::string& e) {
      return e.find("consumed twice in epoch 1: rank 0 step 1 and rank 1 step 3") != std::string::npos;
    }));
  }
  SECTION("steps after the last logged") {
    log_steps(logs, 0, 1, 4);
    const auto a = audit_sample_logs(logs, samples, geometry, seed, 5);
    CHECK_FALSE(a.ok());
    CHECK_THAT(a.errors.front(), Catch::Contains("logged steps end at 4, the job has 5"));
  }
}

TEST_CASE("a sample log file is read line by line and a torn line is named", "[core][data]") {
  cohort::test::temp_dir dir;
  const auto good = dir.write("rank-0.jsonl", R"({"attempt": 0, "step": 1, "samples": [3, 1]})"
                                              "\n"
                                              R"({"attempt": 1, "step": 1, "samples": [3, 1]})"
                                              "\n");
  const auto lines = read_sample_log(good);
  REQUIRE(lines.size() == 2);
  CHECK(lines[1].attempt == 1);
  CHECK(lines[1].samples == std::vector<std::int64_t>{3, 1});
  const auto torn = dir.write("rank-1.jsonl", R"({"attempt": 0, "step": 1, "samp)");
  CHECK_THROWS_WITH(read_sample_log(torn), Catch::Contains("rank-1.jsonl line 1: not a sample line"));
}

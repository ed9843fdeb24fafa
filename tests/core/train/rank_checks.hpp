// What the workload tests require of a run's ranks (workload_runs.hpp): that every rank ended
// without an error, or that a run killed at a step ended on every rank with the cancellation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "config/job_spec.hpp"
#include "core/train/workload.hpp"
#include "tests/core/train/workload_runs.hpp"

namespace cohort::test {

// Every rank of `results` ended without an error.
inline void require_ok(const std::vector<rank_result<rank_run>>& results) {
  for (const auto& r : results) REQUIRE(r.error_text() == "");
}

// Runs `spec` until rank 0 reported step `stop_after`, as a worker group that is killed there:
// every rank must end cancelled.
inline void run_until(const config::job_spec& spec, const std::string& run_dir, std::int64_t stop_after,
                      const run_options& options = {}) {
  for (const auto& r : run_until_step(spec, run_dir, stop_after, options)) {
    REQUIRE(r.error);
    REQUIRE_THROWS_AS(std::rethrow_exception(r.error), core::train::cancelled_error);
  }
}

// `before` run straight to its end in `straight_dir`; in `resumed_dir` killed once rank 0
// reported step `stop_after`, then resumed by `after` (another world size, the same global batch)
// to its end.
inline void run_straight_and_resumed_by(const config::job_spec& before, const config::job_spec& after,
                                        const std::string& straight_dir, const std::string& resumed_dir,
                                        std::int64_t stop_after) {
  require_ok(run_workload(before, straight_dir));
  run_until(before, resumed_dir, stop_after);
  require_ok(run_workload(after, resumed_dir));
}

}  // namespace cohort::test

// The emergency checkpoint against a preemption's deadline: saved when the last save plus a step
// ends before it with the margin to spare, else not, with the numbers that decided it.
#include <catch2/catch.hpp>

#include "core/train/emergency_save.hpp"

using namespace cohort::core::train;

TEST_CASE("without a deadline the emergency checkpoint is saved as before, saying nothing", "[core]") {
  const auto plan = plan_emergency_save(save_record{100, 1 << 20, 1}, 1, 0, 1'000'000, 4);
  CHECK(plan.save);
  CHECK(plan.why.empty());
}

TEST_CASE("with no timed save to estimate from, the emergency checkpoint is saved and the log says why",
          "[core]") {
  const auto plan = plan_emergency_save(std::nullopt, 0.5, 61'000, 1'000, 0);
  CHECK(plan.save);
  CHECK(plan.why ==
        "saving an emergency checkpoint with 60.0 s left before the deadline (no save of this job was timed "
        "yet "
        "to estimate from)");
}

TEST_CASE(
    "an emergency checkpoint that ends before the deadline less the margin is saved, naming the "
    "estimate and the time left",
    "[core]") {
  // 2 s + 20 s = 22 s, 27 s left: 22 <= 27 - 5.
  const auto plan = plan_emergency_save(save_record{20, 3 << 20, 1}, 2, 28'000, 1'000, 4);
  CHECK(plan.save);
  CHECK(plan.why ==
        "saving an emergency checkpoint: about 22.0 s (a step of 2.0 s, then the last save's 20.0 s for 3.0 "
        "MiB "
        "on rank 1), 27.0 s left before the deadline");
}

TEST_CASE(
    "an emergency checkpoint that cannot end before the deadline less the margin is not saved, and "
    "the job keeps its last committed checkpoint, said with the numbers",
    "[core]") {
  // 2 s + 20.5 s = 22.5 s, 27 s left: 22.5 > 27 - 5.
  const auto plan = plan_emergency_save(save_record{20.5, 1 << 19, 0}, 2, 28'000, 1'000, 4);
  CHECK_FALSE(plan.save);
  CHECK(
      plan.why ==
      "no emergency checkpoint: it would take about 22.5 s (a step of 2.0 s, then the last save's 20.5 s for "
      "0.5 MiB on rank 0), but 27.0 s are left before the deadline (less a 5.0 s margin); the job keeps "
      "checkpoint step 4");
  // A deadline already past, and no checkpoint yet.
  const auto late = plan_emergency_save(save_record{1, 1, 0}, 0, 1'000, 3'000, 0);
  CHECK_FALSE(late.save);
  CHECK_THAT(late.why,
             Catch::Contains("but -2.0 s are left") && Catch::EndsWith("the job keeps no checkpoint"));
}

// Fencing of head commands: a node refuses what a deposed head sends, and the head takes step and
// checkpoint reports only from a job's current attempt.
#include <catch2/catch.hpp>

#include "actors/epoch_fence.hpp"
#include "actors/head_state.hpp"
#include "config/job_spec.hpp"
#include "tests/actors/job_specs.hpp"

using namespace cohort::actors;

TEST_CASE("a node refuses a command from an epoch older than the newest leader it has seen, "
          "naming both epochs",
          "[actors]") {
  epoch_fence fence;
  fence.observe(3);  // the welcome of the leader of epoch 3
  CHECK_FALSE(fence.refuse(3, "stop_attempt of job 1 attempt 1").has_value());
  const auto refused = fence.refuse(2, "stop_attempt of job 1 attempt 1");
  REQUIRE(refused.has_value());
  CHECK(*refused ==
        "refused stop_attempt of job 1 attempt 1: it comes from the head of epoch 2, but the head "
        "of epoch 3 leads now (a deposed head's command is fenced)");
  CHECK(fence.refused() == 1);
  // A command of a newer leader raises the fence before its welcome arrives.
  CHECK_FALSE(fence.refuse(5, "start_trainer of job 2 attempt 1").has_value());
  CHECK(fence.highest() == 5);
  CHECK(fence.refuse(3, "release_attempt of job 1 attempt 1").has_value());
  fence.observe(4);  // a late welcome never lowers it
  CHECK(fence.highest() == 5);
  CHECK(fence.refused() == 2);
}

TEST_CASE("an embedded cluster's epoch-0 commands are admitted until a leader of a real epoch is "
          "seen",
          "[actors]") {
  epoch_fence fence;
  CHECK_FALSE(fence.refuse(0, "start_trainer of job 1 attempt 1").has_value());
  fence.observe(1);
  CHECK(fence.refuse(0, "start_trainer of job 1 attempt 1").has_value());
}

TEST_CASE("the head ignores step and checkpoint reports of a zombie attempt of a job", "[actors]") {
  head_state head;
  head.add_node({"n1", {{"CPU", 2}}});
  cohort::test::lr_job_options o;
  o.max_failures = -1;
  const auto json = cohort::test::linear_regression_job(o);
  const auto id = head.submit(cohort::config::parse_job_spec(json), json);
  REQUIRE(head.schedule().size() == 1);
  head.on_running(id, 0);
  head.on_outcome(attempt_outcome{id, 0, false, failure_cause{0, 1, "n1", "lost"}});
  REQUIRE(head.schedule().size() == 1);  // attempt 2
  REQUIRE(head.find(id)->attempts == 2);

  progress_report zombie;
  zombie.job_id = id;
  zombie.attempt = 0;
  zombie.step = 9;
  zombie.checkpoint_step = 8;
  CHECK_FALSE(head.on_progress(zombie));
  CHECK(head.find(id)->step == 0);
  CHECK(head.find(id)->checkpoint_step == 0);

  progress_report current = zombie;
  current.attempt = 1;
  current.step = 2;
  current.checkpoint_step = 2;
  CHECK(head.on_progress(current));
  CHECK(head.find(id)->step == 2);
  CHECK(head.find(id)->checkpoint_step == 2);
}

// The trainer's attempt protocol as plain state (actors/attempt_state.hpp), event by event,
// without CAF: what a head that comes back is told again, what a late worker is told, how the
// head's commands reach the workers and are fenced by epoch, how the attempt ends and who is
// blamed.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <variant>

#include "actors/attempt_state.hpp"

using namespace cohort::actors;

namespace {

trainer_setup two_ranks() {
  trainer_setup s;
  s.job_id = "job-7";
  s.attempt = 2;
  s.trainer_node = "n0";
  s.rank_nodes = {"n0", "n1"};
  s.spec.run.failure.hang_timeout_s = 10;
  s.spec.run.failure.startup_timeout_s = 60;
  return s;
}

template <class T>
std::vector<T> head_messages(const attempt_actions& a) {
  std::vector<T> out;
  for (const auto& m : a.to_head)
    if (const auto* t = std::get_if<T>(&m)) out.push_back(*t);
  return out;
}

template <class T>
std::vector<std::pair<std::int32_t, T>> worker_messages(const attempt_actions& a) {
  std::vector<std::pair<std::int32_t, T>> out;
  for (const auto& [rank, m] : a.to_workers)
    if (const auto* t = std::get_if<T>(&m)) out.emplace_back(rank, *t);
  return out;
}

log_line output(const std::string& text) { return log_line{"job-7", 0, "n0", 42, text}; }

// Both ranks started at time 0.
attempt_state started(std::shared_ptr<epoch_fence> fence = nullptr) {
  attempt_state a(two_ranks(), std::move(fence), 0);
  a.on_worker_started(0, 100);
  a.on_worker_started(1, 101);
  return a;
}

}  // namespace

TEST_CASE("an attempt is running once every rank started, and says so again to a head that comes back",
          "[actors]") {
  attempt_state a(two_ranks(), nullptr, 0);
  CHECK(head_messages<attempt_running>(a.on_worker_started(0, 100)).empty());
  const auto both = a.on_worker_started(1, 101);
  REQUIRE(head_messages<attempt_running>(both).size() == 1);
  CHECK(head_messages<attempt_running>(both)[0].attempt == 2);
  const auto again = a.on_reintroduce();
  CHECK(head_messages<trainer_started>(again).size() == 1);
  CHECK(head_messages<attempt_running>(again).size() == 1);
}

TEST_CASE("the outcome is kept and sent to every head that comes back until one acknowledges it",
          "[actors]") {
  auto fence = std::make_shared<epoch_fence>();
  attempt_state a = started(fence);
  CHECK(a.on_worker_finished(worker_finished{"job-7", 2, 0, true, ""}, 1).to_head.empty());
  const auto ended = a.on_worker_finished(worker_finished{"job-7", 2, 1, true, ""}, 2);
  CHECK(ended.settled);
  REQUIRE(head_messages<attempt_outcome>(ended).size() == 1);
  CHECK(head_messages<attempt_outcome>(ended)[0].succeeded);
  CHECK(worker_messages<stop_attempt>(ended).size() == 2);  // every started worker
  CHECK(head_messages<attempt_outcome>(a.on_reintroduce()).size() == 1);
  CHECK(head_messages<attempt_outcome>(a.on_reintroduce()).size() == 1);
  // An acknowledgement of another attempt, or from a deposed head, does not end the trainer.
  CHECK_FALSE(a.on_outcome_ack(outcome_ack{"job-7", 1, 5}).quit);
  CHECK(a.on_outcome_ack(outcome_ack{"job-7", 2, 5}).quit);
  const auto stale = a.on_outcome_ack(outcome_ack{"job-7", 2, 4});
  CHECK_FALSE(stale.quit);
  REQUIRE(head_messages<log_line>(stale).size() == 1);
  CHECK_THAT(head_messages<log_line>(stale)[0].text, Catch::Contains("refused outcome_ack") &&
                                                         Catch::Contains("epoch 4") &&
                                                         Catch::Contains("epoch 5"));
}

TEST_CASE("output lines are numbered, kept until acknowledged and sent again to a head that comes back",
          "[actors]") {
  attempt_state a = started();
  for (const char* text : {"one", "two", "three"}) {
    const auto sent = head_messages<log_line>(a.on_log(output(text)));
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].attempt == 2);
    CHECK(sent[0].kept_from == 1);
  }
  a.on_log_ack(log_ack{"job-7", 2, 2, 0});
  CHECK(a.unacked_lines() == 1);
  const auto again = head_messages<log_line>(a.on_reintroduce());
  REQUIRE(again.size() == 1);
  CHECK(again[0].text == "three");
  CHECK(again[0].seq == 3);
  CHECK(again[0].kept_from == 3);
}

TEST_CASE("unacknowledged output is bounded: the oldest lines go, and the next head is told how many",
          "[actors]") {
  attempt_state a = started();
  const std::string big(max_unacked_log_bytes / 4 + 1, 'x');
  for (int i = 0; i < 6; ++i) a.on_log(output(big));
  CHECK(a.unacked_lines() == 3);
  const auto again = head_messages<log_line>(a.on_reintroduce());
  REQUIRE(again.size() == 4);
  CHECK_THAT(again[0].text, Catch::Contains("3 lines of output were dropped"));
  CHECK(again[1].seq == 4);
  CHECK(again[3].kept_from == 4);  // a head waits for none of the dropped lines
  // Told once.
  CHECK(head_messages<log_line>(a.on_reintroduce()).size() == 3);
}

TEST_CASE("a worker that starts after the head's commands is told their totals and the preemption's deadline",
          "[actors]") {
  attempt_state a(two_ranks(), nullptr, 0);
  a.on_worker_started(0, 100);
  const auto release = a.on_release(release_attempt{"job-7", 2, 0});
  REQUIRE(worker_messages<worker_command>(release).size() == 1);  // only rank 0 is up
  CHECK(head_messages<log_line>(release).size() == 1);
  a.on_checkpoint(checkpoint_attempt{"job-7", 2, 0});
  a.on_preempt(preempt_attempt{"job-7", 2, 0, 1'800'000'000'000});  // its deadline (unix ms)
  const auto late = worker_messages<worker_command>(a.on_worker_started(1, 101));
  REQUIRE(late.size() == 2);
  CHECK(late[0].first == 1);
  CHECK(late[0].second.kind == worker_command_kind::release);
  CHECK(late[0].second.n == 1);
  CHECK(late[1].second.kind == worker_command_kind::preempt);  // the preemption's mark is kept
  CHECK(late[1].second.n == 2);
  CHECK(late[1].second.deadline_ms == 1'800'000'000'000);  // and its deadline
  // A later checkpoint request of a preempted attempt keeps the mark too.
  const auto more = worker_messages<worker_command>(a.on_checkpoint(checkpoint_attempt{"job-7", 2, 0}));
  REQUIRE(more.size() == 2);
  CHECK(more[0].second.kind == worker_command_kind::preempt);
  CHECK(more[0].second.n == 3);
  CHECK(more[0].second.deadline_ms == 1'800'000'000'000);
}

TEST_CASE("a command from a deposed head is refused and logged, and reaches no worker", "[actors]") {
  auto fence = std::make_shared<epoch_fence>();
  attempt_state a = started(fence);
  CHECK(worker_messages<worker_command>(a.on_checkpoint(checkpoint_attempt{"job-7", 2, 3})).size() == 2);
  for (const auto& refused :
       {a.on_checkpoint(checkpoint_attempt{"job-7", 2, 2}), a.on_release(release_attempt{"job-7", 2, 2}),
        a.on_stop(stop_attempt{"job-7", 2, "", 2})}) {
    CHECK(refused.to_workers.empty());
    CHECK_FALSE(refused.stopped);
    REQUIRE(head_messages<log_line>(refused).size() == 1);
    CHECK_THAT(head_messages<log_line>(refused)[0].text,
               Catch::Contains("a deposed head's command is fenced"));
  }
  CHECK(fence->refused() == 3);
}

TEST_CASE("the head's stop ends the attempt with no outcome and stops every worker", "[actors]") {
  attempt_state a = started();
  const auto stop = a.on_stop(stop_attempt{"job-7", 2, "cancelled", 0});
  CHECK(stop.stopped);
  CHECK(worker_messages<stop_attempt>(stop).size() == 2);
  CHECK(stop.to_head.empty());
  CHECK_FALSE(a.has_outcome());
  // A rank that fails afterwards changes nothing.
  CHECK(a.on_worker_finished(worker_finished{"job-7", 2, 1, false, "boom"}, 1).to_head.empty());
}

TEST_CASE("the first failure ends the attempt, blaming its rank, node and process", "[actors]") {
  attempt_state a = started();
  auto wf = worker_finished{"job-7", 2, 1, false, "CUDA error", failure_kind::retryable, "trace"};
  const auto failed = a.on_worker_finished(wf, 1);
  REQUIRE(head_messages<attempt_outcome>(failed).size() == 1);
  const auto& cause = head_messages<attempt_outcome>(failed)[0].cause;
  CHECK_FALSE(head_messages<attempt_outcome>(failed)[0].succeeded);
  CHECK(cause.rank == 1);
  CHECK(cause.node == "n1");
  CHECK(cause.pid == 101);
  CHECK(cause.reason == "CUDA error");
  CHECK(cause.report == "trace");
  CHECK(cause.attempt == 2);
  // Only the first: the other rank's failure after it is not another outcome.
  CHECK(a.on_worker_finished(worker_finished{"job-7", 2, 0, false, "peer closed"}, 2).to_head.empty());
  CHECK(a.on_worker_lost(0, "killed").to_head.empty());
}

TEST_CASE("a worker lost without a word fails the attempt, unless its rank had finished", "[actors]") {
  attempt_state a = started();
  a.on_worker_finished(worker_finished{"job-7", 2, 0, true, ""}, 1);
  CHECK(a.on_worker_lost(0, "exited").to_head.empty());
  const auto lost = a.on_worker_lost(1, "exited without reporting how its run ended");
  REQUIRE(head_messages<attempt_outcome>(lost).size() == 1);
  CHECK(head_messages<attempt_outcome>(lost)[0].cause.rank == 1);
}

TEST_CASE("a rank that stops making progress is killed and blamed at the hang check", "[actors]") {
  attempt_state a = started();
  bool again = false;
  CHECK(a.on_hang_check(5, again).to_head.empty());
  CHECK(again);
  // Both ranks finish step 1 at t=6; only rank 0 goes on after that.
  for (std::int32_t rank : {0, 1}) {
    progress_report r;
    r.job_id = "job-7";
    r.rank = rank;
    r.step = 1;
    a.on_progress(r, 6);
  }
  for (double t = 7; t < 40; t += 1)
    a.on_heartbeat(rank_heartbeat{"job-7", 2, 0, 1 + static_cast<std::int64_t>(t)}, t);
  for (double t = 7; t < 40; t += 1) a.on_heartbeat(rank_heartbeat{"job-7", 2, 1, 1}, t);
  const auto hung = a.on_hang_check(40, again);
  CHECK_FALSE(again);
  const auto kills = worker_messages<kill_hung_worker>(hung);
  REQUIRE(kills.size() == 1);
  CHECK(kills[0].first == 1);
  REQUIRE(head_messages<attempt_outcome>(hung).size() == 1);
  const auto& cause = head_messages<attempt_outcome>(hung)[0].cause;
  CHECK(cause.hung);
  CHECK(cause.rank == 1);
  CHECK(cause.pid == 101);
  // Settled: no further checks.
  CHECK(a.on_hang_check(41, again).to_head.empty());
  CHECK_FALSE(again);
}

TEST_CASE(
    "rank 0's newest report goes to the head stamped with the attempt, and again to a head that comes back",
    "[actors]") {
  attempt_state a = started();
  progress_report r;
  r.job_id = "job-7";
  r.rank = 0;
  r.step = 3;
  r.attempt = 0;
  const auto sent = head_messages<progress_report>(a.on_progress(r, 1));
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].attempt == 2);
  r.rank = 1;
  CHECK(a.on_progress(r, 1).to_head.empty());  // only rank 0's reports go on
  const auto again = head_messages<progress_report>(a.on_reintroduce());
  REQUIRE(again.size() == 1);
  CHECK(again[0].step == 3);
}

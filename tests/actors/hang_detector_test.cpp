// The trainer's hang detector alone: who is hung, and that a rank waiting on a hung peer is never
// the one named. Time is given by the test (seconds), so nothing here waits.
#include <catch2/catch.hpp>

#include "actors/hang_detector.hpp"

using namespace cohort::actors;

namespace {

// Two ranks on n0 and n1, hang allowance 3 s, startup allowance 10 s, both started at t = 0 with
// pids 100 and 101.
hang_detector two_ranks() {
  hang_detector d({"n0", "n1"}, hang_limits{3, 10}, 0);
  d.on_started(0, 100);
  d.on_started(1, 101);
  return d;
}

}  // namespace

TEST_CASE("ranks that advance their step and heartbeat are never hung", "[actors]") {
  auto d = two_ranks();
  for (int t = 1; t <= 30; ++t) {
    d.on_progress(0, t, t);
    d.on_progress(1, t, t);
    CHECK_FALSE(d.check(t + 2.9));
  }
}

TEST_CASE("a rank that is silent while its peer waits in a collective is named hung, with node, "
          "pid and last step",
          "[actors]") {
  auto d = two_ranks();
  d.on_progress(0, 5, 1);
  d.on_progress(1, 5, 1);
  // Rank 1 is stopped at t = 1; rank 0 enters the next step's collective at 1.2 and heartbeats.
  for (double t = 1.5; t < 8; t += 0.5) d.on_heartbeat(0, 5, t - 1.2, t);
  CHECK_FALSE(d.check(3.9));
  auto v = d.check(4.1);
  REQUIRE(v);
  CHECK(v->rank == 1);
  CHECK(v->node == "n1");
  CHECK(v->pid == 101);
  CHECK(v->last_step == 5);
  CHECK(v->silent);
  CHECK_THAT(v->reason, Catch::Contains("rank 1 on node n1 (pid 101)") &&
                            Catch::Contains("after step 5") && Catch::Contains("no heartbeat") &&
                            Catch::Contains("rank(s) 0 waited in a collective"));
}

TEST_CASE("a rank waiting in a collective is not named even when it waits longer than the hang "
          "allowance, while its peer is the silent one",
          "[actors]") {
  auto d = two_ranks();
  d.on_progress(0, 2, 1);
  d.on_progress(1, 2, 1);
  d.on_heartbeat(1, 2, std::nullopt, 1.5);  // computing, then frozen
  for (double t = 1.0; t <= 20; t += 0.5) d.on_heartbeat(0, 2, t - 1.0, t);
  for (double t = 4.6; t <= 20; t += 0.5) {
    auto v = d.check(t);
    REQUIRE(v);
    CHECK(v->rank == 1);
  }
}

TEST_CASE("a rank that heartbeats but makes no progress outside a collective is named as stuck in "
          "its own work",
          "[actors]") {
  auto d = two_ranks();
  d.on_progress(0, 7, 1);
  d.on_progress(1, 7, 1);
  for (double t = 1.5; t < 6; t += 0.5) {
    d.on_heartbeat(0, 7, std::nullopt, t);      // alive, not in a collective: stuck
    d.on_heartbeat(1, 7, t - 1.2, t);           // waits for rank 0
  }
  CHECK_FALSE(d.check(3.9));
  auto v = d.check(4.1);
  REQUIRE(v);
  CHECK(v->rank == 0);
  CHECK_FALSE(v->silent);
  CHECK_THAT(v->reason, Catch::Contains("stuck in its own work"));
}

TEST_CASE("before its first step a rank has the longer startup allowance", "[actors]") {
  auto d = two_ranks();
  for (double t = 0.5; t <= 12; t += 0.5) {
    d.on_heartbeat(0, 0, std::nullopt, t);  // loading the model
    d.on_heartbeat(1, 0, std::nullopt, t);
  }
  CHECK_FALSE(d.check(9.9));
  auto v = d.check(10.1);
  REQUIRE(v);
  CHECK(v->last_step == 0);
  CHECK_THAT(v->reason, Catch::Contains("before its first step") &&
                            Catch::Contains("run.failure.startup_timeout_s"));
}

TEST_CASE("a rank silent past the hang allowance before its first step is hung without waiting for "
          "the startup allowance",
          "[actors]") {
  auto d = two_ranks();
  d.on_heartbeat(1, 0, std::nullopt, 0.5);  // loading the model, then stopped
  for (double t = 0.5; t <= 5; t += 0.5) d.on_heartbeat(0, 0, std::nullopt, t);
  CHECK_FALSE(d.check(3.4));
  auto v = d.check(3.6);
  REQUIRE(v);
  CHECK(v->rank == 1);
  CHECK(v->silent);
  CHECK_THAT(v->reason, Catch::Contains("before its first step") &&
                            Catch::Contains("run.failure.hang_timeout_s"));
}

TEST_CASE("a rank never heard from, whose process is still starting, has the startup allowance",
          "[actors]") {
  auto d = two_ranks();
  for (double t = 0.5; t <= 11; t += 0.5) d.on_heartbeat(0, 0, std::nullopt, t);
  CHECK_FALSE(d.check(9.9));
  auto v = d.check(10.1);
  REQUIRE(v);
  CHECK(v->rank == 1);
  CHECK(v->silent);
}

TEST_CASE("a finished rank is judged no more", "[actors]") {
  auto d = two_ranks();
  d.on_progress(0, 10, 1);
  d.on_progress(1, 10, 1);
  d.on_finished(0);
  d.on_finished(1);
  CHECK_FALSE(d.check(100));
}

TEST_CASE("when every stalled rank waits in a collective the one that began waiting last is named",
          "[actors]") {
  auto d = two_ranks();
  d.on_progress(0, 3, 1);
  d.on_progress(1, 3, 1);
  for (double t = 2; t <= 8; t += 0.5) {
    d.on_heartbeat(0, 3, t - 1.1, t);
    d.on_heartbeat(1, 3, t - 1.6, t);
  }
  CHECK_FALSE(d.check(4.5));  // waiting, but not yet past the allowance
  auto v = d.check(5);
  REQUIRE(v);
  CHECK(v->rank == 1);
  CHECK_THAT(v->reason, Catch::Contains("began waiting last"));
}

TEST_CASE("a rank whose collective failed is not blamed when its peer went silent while it waited",
          "[actors]") {
  auto d = two_ranks();
  d.on_progress(0, 4, 1);
  d.on_progress(1, 4, 1);
  d.on_heartbeat(0, 4, 0.5, 2.9);
  auto v = d.silent_peer(0, 3);
  REQUIRE(v);
  CHECK(v->rank == 1);
  CHECK_THAT(v->reason, Catch::Contains("while rank 0 waited on it"));
  d.on_heartbeat(1, 4, std::nullopt, 2.9);
  CHECK_FALSE(d.silent_peer(0, 3));
}

TEST_CASE("heartbeats come four times within the hang allowance, bounded to [50 ms, 5 s]",
          "[actors]") {
  CHECK(heartbeat_interval_s(4) == Approx(1));
  CHECK(heartbeat_interval_s(0.1) == Approx(0.05));
  CHECK(heartbeat_interval_s(3600) == Approx(5));
}

TEST_CASE("a rank stopped just after a heartbeat is named silent, never busy on a stale heartbeat",
          "[actors]") {
  auto d = two_ranks();
  d.on_progress(0, 5, 1);
  d.on_progress(1, 5, 1);
  d.on_heartbeat(1, 5, std::nullopt, 1.04);  // in its pause between steps, then stopped
  for (double t = 1.5; t < 6; t += 0.5) d.on_heartbeat(0, 5, t - 1.2, t);
  CHECK_FALSE(d.check(4.03));  // stalled, but its last heartbeat is too old to call it busy
  auto v = d.check(4.05);
  REQUIRE(v);
  CHECK(v->rank == 1);
  CHECK(v->silent);
}

TEST_CASE("ranks held at run.hold_before_step are not hung while held, and get a fresh allowance "
          "when released",
          "[actors]") {
  auto d = two_ranks();
  d.on_progress(0, 2, 1);
  d.on_progress(1, 2, 1);
  d.hold();
  for (double t = 2; t <= 60; t += 0.5) {  // held for a minute, heartbeating, not in a collective
    d.on_heartbeat(0, 2, std::nullopt, t);
    d.on_heartbeat(1, 2, std::nullopt, t);
    CHECK_FALSE(d.check(t));
  }
  d.release(60);
  d.on_heartbeat(0, 2, std::nullopt, 62);
  d.on_heartbeat(1, 2, std::nullopt, 62);
  CHECK_FALSE(d.check(62.5));  // within the 3 s allowance for the next step
  d.on_heartbeat(0, 2, std::nullopt, 63.5);
  d.on_heartbeat(1, 2, std::nullopt, 63.5);
  const auto hung = d.check(64);  // still no step 3 after 4 s: stuck again
  REQUIRE(hung);
  CHECK(hung->last_step == 2);
  // A held rank that falls silent is still named: a stopped process cannot be released.
  auto s = two_ranks();
  s.on_progress(0, 2, 1);
  s.on_progress(1, 2, 1);
  s.hold();
  s.on_heartbeat(0, 2, std::nullopt, 10);
  const auto silent = s.check(10);
  REQUIRE(silent);
  CHECK(silent->rank == 1);
  CHECK(silent->silent);
}

namespace {

using cohort::core::train::activity_reading;
using cohort::core::train::rank_phase;

// Two ranks as two_ranks(), with a checkpoint allowance of 20 s.
hang_detector two_saving_ranks() {
  hang_detector d({"n0", "n1"}, hang_limits{3, 10, 20}, 0);
  d.on_started(0, 100);
  d.on_started(1, 101);
  return d;
}

activity_reading saving(std::uint64_t done, std::uint64_t total = 8'000'000'000) {
  return {rank_phase::saving, 6, done, total};
}

}  // namespace

TEST_CASE("a rank whose checkpoint save outlasts the hang allowance is not hung while its bytes "
          "advance, and its peer waiting in the next step's collective is not named either",
          "[actors]") {
  auto d = two_saving_ranks();
  d.on_progress(0, 6, 1);
  d.on_progress(1, 6, 1);
  // Rank 1 saved quickly and waits in step 7's collective; rank 0 writes for 60 s, 1 GB a 7.5 s.
  for (double t = 1.5; t <= 61; t += 0.5) {
    d.on_heartbeat(0, 6, std::nullopt, t, saving(static_cast<std::uint64_t>((t - 1) / 7.5) * 1'000'000'000));
    d.on_heartbeat(1, 6, t - 2, t);
    CHECK_FALSE(d.check(t));
  }
  CHECK(d.activity() == "saving checkpoint step 6: 8.0 of 8.0 GB");
}

TEST_CASE("a rank whose save writes nothing for the checkpoint allowance is named, with the "
          "phase and its bytes",
          "[actors]") {
  auto d = two_saving_ranks();
  d.on_progress(0, 6, 1);
  d.on_progress(1, 6, 1);
  d.on_heartbeat(0, 6, std::nullopt, 2, saving(1'000'000'000));  // then no byte more
  for (double t = 2.5; t <= 21.5; t += 0.5) {
    d.on_heartbeat(0, 6, std::nullopt, t, saving(1'000'000'000));
    d.on_heartbeat(1, 6, t - 2, t);
    CHECK_FALSE(d.check(t));
  }
  d.on_heartbeat(0, 6, std::nullopt, 22.5, saving(1'000'000'000));
  auto v = d.check(22.5);
  REQUIRE(v);
  CHECK(v->rank == 0);
  CHECK(v->pid == 100);
  CHECK(v->last_step == 6);
  CHECK_FALSE(v->silent);
  CHECK_THAT(v->reason, Catch::Contains("hung: rank 0 on node n0 (pid 100)") &&
                            Catch::Contains("while saving checkpoint step 6: 1.0 of 8.0 GB written") &&
                            Catch::Contains("run.failure.checkpoint_timeout_s 20.0 s"));
}

TEST_CASE("rank 0 waiting for a commit and a rank done with its run are judged by silence alone",
          "[actors]") {
  auto d = two_saving_ranks();
  d.on_progress(0, 20, 1);
  d.on_progress(1, 20, 1);
  // Rank 1 finished its run and closes its process; rank 0 waits for a commit, then exports.
  for (double t = 1.5; t <= 100; t += 0.5) {
    d.on_heartbeat(1, 20, std::nullopt, t, {rank_phase::finished, 0, 0, 0});
    d.on_heartbeat(0, 20, std::nullopt, t,
                   t < 50 ? activity_reading{rank_phase::committing, 20, 4, 4}
                          : activity_reading{rank_phase::exporting, 20, static_cast<std::uint64_t>(t), 200});
    CHECK_FALSE(d.check(t));
  }
  CHECK(d.activity() == "exporting the model of step 20: 0.0 of 0.0 GB");
  // Silence is still judged: rank 1 stops heartbeating at t = 100.
  for (double t = 100.5; t <= 104; t += 0.5)
    d.on_heartbeat(0, 20, std::nullopt, t, {rank_phase::exporting, 20, static_cast<std::uint64_t>(t), 200});
  auto v = d.check(104);
  REQUIRE(v);
  CHECK(v->rank == 1);
  CHECK(v->silent);
}

TEST_CASE("back in training after a save, a rank's step allowance starts again", "[actors]") {
  auto d = two_saving_ranks();
  d.on_progress(0, 6, 1);
  d.on_progress(1, 6, 1);
  for (double t = 1.5; t <= 30; t += 0.5) {
    d.on_heartbeat(0, 6, std::nullopt, t, saving(static_cast<std::uint64_t>(t)));
    d.on_heartbeat(1, 6, std::nullopt, t, saving(static_cast<std::uint64_t>(t)));
  }
  // Both are back computing step 7 at t = 30: 3 s of allowance from there.
  for (double t = 30; t <= 32.5; t += 0.5) {
    d.on_heartbeat(0, 6, std::nullopt, t);
    d.on_heartbeat(1, 6, std::nullopt, t);
    CHECK_FALSE(d.check(t));
  }
  d.on_heartbeat(0, 6, std::nullopt, 33.5);
  d.on_heartbeat(1, 6, 0.5, 33.5);
  auto v = d.check(33.5);
  REQUIRE(v);
  CHECK(v->rank == 0);
  CHECK_THAT(v->reason, Catch::Contains("made no progress for 3.5 s after step 6") &&
                            Catch::Contains("not waiting in a collective"));
}

TEST_CASE("the activity sums the ranks' bytes of the step being saved, and a rank past the hang "
          "allowance in a save is told once",
          "[actors]") {
  auto d = two_saving_ranks();
  CHECK(d.activity().empty());
  d.on_heartbeat(0, 6, std::nullopt, 1, saving(1'500'000'000, 4'000'000'000));
  d.on_heartbeat(1, 6, std::nullopt, 1, saving(2'000'000'000, 4'000'000'000));
  CHECK(d.activity() == "saving checkpoint step 6: 3.5 of 8.0 GB");
  d.on_heartbeat(1, 6, std::nullopt, 2, {rank_phase::committing, 6, 4'000'000'000, 4'000'000'000});
  CHECK(d.activity() == "saving checkpoint step 6: 5.5 of 8.0 GB");
  CHECK(d.long_phases(3.9).empty());
  const auto told = d.long_phases(4.5);
  REQUIRE(told.size() == 1);
  CHECK_THAT(told[0], Catch::Contains("rank 0 has been saving checkpoint step 6") &&
                          Catch::Contains("judged by its written bytes (run.failure.checkpoint_timeout_s 20.0 s)"));
  CHECK(d.long_phases(5.5).size() == 1);  // rank 1, committing since t = 2
  CHECK(d.long_phases(9).empty());
  d.on_heartbeat(0, 7, std::nullopt, 10);
  d.on_heartbeat(1, 7, std::nullopt, 10);
  CHECK(d.activity().empty());
}

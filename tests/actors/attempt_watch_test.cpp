// The head's watch over the trainers of running attempts (actors/attempt_watch.hpp): one trainer
// per attempt, announced again without change, replaced by a newer announcement, forgotten when
// the attempt ends, and named by its down.
#include <algorithm>

#include <catch2/catch.hpp>

#include "actors/attempt_watch.hpp"

using cohort::actors::attempt_watch;

namespace {
using watch = attempt_watch<std::string, int>;  // trainers named, downs keyed by number
}

TEST_CASE("a trainer that announces its attempt is watched, and announcing it again changes nothing",
          "[actors]") {
  watch w;
  CHECK_FALSE(w.trainer("job-1", 0));
  auto first = w.watch(1, "job-1", 0, "trainer-a");
  CHECK_FALSE(first.already);
  CHECK_FALSE(first.replaced);
  CHECK(w.trainer("job-1", 0) == std::optional<std::string>("trainer-a"));
  auto again = w.watch(1, "job-1", 0, "trainer-a");
  CHECK(again.already);
  CHECK(w.size() == 1);
  CHECK_FALSE(w.trainer("job-1", 1));  // another attempt of the job has no trainer here
}

TEST_CASE(
    "another trainer announcing the same attempt replaces the watched one, whose down then "
    "names nothing",
    "[actors]") {
  watch w;
  w.watch(1, "job-1", 0, "trainer-a");
  auto second = w.watch(2, "job-1", 0, "trainer-b");
  CHECK_FALSE(second.already);
  CHECK(second.replaced == std::optional<std::string>("trainer-a"));
  CHECK(w.trainer("job-1", 0) == std::optional<std::string>("trainer-b"));
  CHECK_FALSE(w.on_down(1));
  auto down = w.on_down(2);
  REQUIRE(down);
  CHECK(down->job_id == "job-1");
  CHECK(down->attempt == 0);
  CHECK(down->handle == "trainer-b");
  CHECK(w.size() == 0);
}

TEST_CASE("an attempt that ended here forgets its trainer, whose later down names nothing", "[actors]") {
  watch w;
  w.watch(1, "job-1", 0, "trainer-a");
  w.watch(2, "job-2", 3, "trainer-c");
  CHECK(w.forget("job-1", 0) == std::optional<std::string>("trainer-a"));
  CHECK_FALSE(w.forget("job-1", 0));
  CHECK_FALSE(w.on_down(1));
  CHECK(w.trainer("job-2", 3) == std::optional<std::string>("trainer-c"));
}

TEST_CASE("a stop reaches every watched trainer of the job, of any attempt", "[actors]") {
  watch w;
  w.watch(1, "job-1", 0, "old");
  w.watch(2, "job-1", 1, "new");
  w.watch(3, "job-2", 0, "other");
  auto of_job = w.trainers_of("job-1");
  std::sort(of_job.begin(), of_job.end());
  CHECK(of_job == std::vector<std::string>{"new", "old"});
  CHECK(w.trainers_of("job-9").empty());
}

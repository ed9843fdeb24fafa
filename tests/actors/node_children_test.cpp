// What a node runs and its leaving (actors/node_children.hpp): children that end, workers that
// drills aim at until their down, the trainers told when a new leader welcomes the node, and the
// drain's plan from its jobs' graces and a notice's deadline.
#include <catch2/catch.hpp>

#include "actors/node_children.hpp"

using cohort::actors::drain_margin;
using namespace std::chrono_literals;

namespace {
using children = cohort::actors::node_children<std::string, int>;  // handles named, keyed by number
using verdict = children::exit_verdict;
}  // namespace

TEST_CASE("a child's exit keeps the node running, and an exit from no child is the node's own", "[actors]") {
  children c;
  c.add_trainer(1, "job-1", "trainer", 0);
  c.add_worker(2, "job-1", 0, "worker-0", 0);
  CHECK(c.size() == 2);
  CHECK(c.on_exit(2) == verdict::stay);
  CHECK(c.on_exit(2) == verdict::not_a_child);  // gone already: not a child any more
  CHECK(c.on_exit(9) == verdict::not_a_child);
  CHECK(c.size() == 1);
}

TEST_CASE("a worker drill finds the job's rank until that worker's down, a trainer drill once", "[actors]") {
  children c;
  c.add_trainer(1, "job-1", "trainer", 0);
  c.add_worker(2, "job-1", 0, "worker-0", 0);
  c.add_worker(3, "job-1", 1, "worker-1", 0);
  CHECK(c.worker("job-1", 1) == std::optional<std::string>("worker-1"));
  CHECK_FALSE(c.worker("job-2", 1));
  c.on_down(3);
  CHECK_FALSE(c.worker("job-1", 1));
  CHECK(c.worker("job-1", 0) == std::optional<std::string>("worker-0"));
  CHECK(c.take_trainer("job-1") == std::optional<std::string>("trainer"));
  CHECK_FALSE(c.take_trainer("job-1"));
}

TEST_CASE("a node welcomed by a new leader tells its live trainers, never its workers", "[actors]") {
  children c;
  c.add_trainer(1, "job-1", "trainer-1", 0);
  c.add_worker(2, "job-1", 0, "worker-0", 0);
  c.add_trainer(3, "job-2", "trainer-2", 0);
  CHECK(c.trainers() == std::vector<std::string>{"trainer-1", "trainer-2"});
  c.on_exit(1);
  CHECK(c.trainers() == std::vector<std::string>{"trainer-2"});
}

TEST_CASE("a draining node with no child quits at once, and a second drain changes nothing", "[actors]") {
  children c;
  const auto plan = c.begin_drain(std::nullopt);
  REQUIRE(plan);
  CHECK(plan->quit_now);
  CHECK(c.draining());
  CHECK_FALSE(c.begin_drain(5s));
}

TEST_CASE(
    "a draining node waits for its children the longest grace of its jobs plus the margin, or "
    "until a sooner deadline, and quits when its last child ends",
    "[actors]") {
  children c;
  c.add_trainer(1, "job-1", "trainer", 30);
  c.add_worker(2, "job-1", 0, "worker-0", 30);
  c.add_worker(3, "job-2", 0, "worker-1", 90);
  SECTION("no deadline") {
    const auto plan = c.begin_drain(std::nullopt);
    REQUIRE(plan);
    CHECK_FALSE(plan->quit_now);
    CHECK(plan->wait == 90s + drain_margin);
  }
  SECTION("a notice's deadline sooner than the grace") {
    CHECK(c.begin_drain(20s)->wait == 20s + drain_margin);
  }
  SECTION("a deadline already past") { CHECK(c.begin_drain(-5s)->wait == drain_margin); }
  SECTION("a deadline later than the grace") { CHECK(c.begin_drain(600s)->wait == 90s + drain_margin); }
  CHECK(c.on_exit(1) == verdict::stay);
  CHECK(c.on_exit(2) == verdict::stay);
  CHECK(c.on_exit(3) == verdict::quit);
}

// The job ids a head takes ahead in its store (actors/job_id_queue.hpp): a submit takes the id
// held, or waits in order for the next; one reservation at a time; a failed one fails the waiting.
#include <catch2/catch.hpp>

#include "actors/job_id_queue.hpp"

using cohort::actors::job_id_queue;

TEST_CASE("a submit takes the id held ahead at once, and the next id is then to be reserved", "[actors]") {
  job_id_queue<std::string> q;
  REQUIRE(q.should_reserve());
  q.reserving();
  CHECK_FALSE(q.should_reserve());  // one reservation at a time
  CHECK_FALSE(q.on_reserved("job-0001"));
  CHECK_FALSE(q.should_reserve());  // one is held
  auto now = q.submit("first");
  REQUIRE(now);
  CHECK(now->first == "first");
  CHECK(now->second == "job-0001");
  CHECK(q.should_reserve());
}

TEST_CASE("submits that come while no id is held wait and get the next ids in their order", "[actors]") {
  job_id_queue<std::string> q;
  q.reserving();
  CHECK_FALSE(q.submit("a"));
  CHECK_FALSE(q.submit("b"));
  CHECK_FALSE(q.should_reserve());
  auto first = q.on_reserved("job-0001");
  REQUIRE(first);
  CHECK(first->first == "a");
  CHECK(first->second == "job-0001");
  REQUIRE(q.should_reserve());
  q.reserving();
  auto second = q.on_reserved("job-0002");
  REQUIRE(second);
  CHECK(second->first == "b");
  CHECK(second->second == "job-0002");
  CHECK(q.should_reserve());
}

TEST_CASE("a reservation that fails fails every submit waiting for it, and the next submit asks again",
          "[actors]") {
  job_id_queue<std::string> q;
  q.reserving();
  q.submit("a");
  q.submit("b");
  CHECK(q.on_reserve_failed() == std::vector<std::string>{"a", "b"});
  CHECK(q.should_reserve());
  CHECK_FALSE(q.submit("c"));
  q.reserving();
  auto next = q.on_reserved("job-0003");
  REQUIRE(next);
  CHECK(next->first == "c");
  CHECK(q.on_reserve_failed().empty());
}

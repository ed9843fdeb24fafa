// What the head passes on of its jobs (actors/output_hub.hpp): events to followers until the job
// ends, events held for a follower catching up on stored lines and handed over once, the output
// an embedded head keeps in memory, and the progress kept for the charts.
#include <algorithm>

#include <catch2/catch.hpp>

#include "actors/output_hub.hpp"

using namespace cohort::actors;

namespace {

using hub = output_hub<std::string>;  // followers named

job_record record(job_state state) {
  job_record r;
  r.id = "job-1";
  r.state = state;
  return r;
}

std::vector<std::string> receivers(const hub::sends& sends) {
  std::vector<std::string> out(sends.size());
  std::transform(sends.begin(), sends.end(), out.begin(), [](const auto& send) { return send.first; });
  return out;
}

}  // namespace

TEST_CASE("every follower of a job hears each event, and none is left once the job ended", "[actors]") {
  hub h;
  h.follow("job-1", "a");
  h.follow("job-1", "b");
  h.follow("job-2", "c");
  auto sends = h.publish(record(job_state::running), "a line");
  CHECK(receivers(sends) == std::vector<std::string>{"a", "b"});
  CHECK(sends[0].second.line == "a line");
  CHECK(receivers(h.publish(record(job_state::succeeded), "SUCCEEDED: done")) ==
        std::vector<std::string>{"a", "b"});
  CHECK(h.publish(record(job_state::running), "late").empty());
}

TEST_CASE(
    "a follower catching up on stored lines gets the events of the meantime once, in order, "
    "then follows while the job runs",
    "[actors]") {
  hub h;
  h.begin_catch_up("job-1", "late");
  CHECK(h.publish(record(job_state::running), "one").empty());  // held, not sent
  h.publish(record(job_state::running), "two");
  auto held = h.end_catch_up("job-1", "late", true);
  REQUIRE(held.size() == 2);
  CHECK(held[0].line == "one");
  CHECK(held[1].line == "two");
  CHECK(receivers(h.publish(record(job_state::running), "three")) == std::vector<std::string>{"late"});
  CHECK(h.end_catch_up("job-1", "late", false).empty());  // handed over once
}

TEST_CASE(
    "a follower whose job ended while it caught up, or whose stored lines could not be read, "
    "does not follow",
    "[actors]") {
  hub h;
  h.begin_catch_up("job-1", "a");
  h.begin_catch_up("job-1", "b");
  h.publish(record(job_state::failed), "FAILED: x");
  CHECK(h.end_catch_up("job-1", "a", false).size() == 1);
  CHECK(h.drop_catch_up("job-1", "b").size() == 1);
  CHECK(h.publish(record(job_state::running), "after").empty());
}

TEST_CASE("an embedded head keeps the newest lines of each job's output in memory", "[actors]") {
  hub h;
  for (std::size_t i = 0; i < max_log_lines_per_job + 2; ++i)
    h.keep_in_memory(log_line{"job-1", 0, "n1", 1, "line " + std::to_string(i)});
  h.keep_in_memory(log_line{"job-2", 0, "n1", 1, "other"});
  const auto lines = h.memory_lines("job-1");
  REQUIRE(lines.size() == max_log_lines_per_job);
  CHECK(lines.front().text == "line 2");
  CHECK(lines.back().text == "line " + std::to_string(max_log_lines_per_job + 1));
  CHECK(h.memory_lines("job-2").size() == 1);
  CHECK(h.memory_lines("job-3").empty());
}

TEST_CASE("each job's logged steps are kept for the charts, a held report not among them", "[actors]") {
  hub h;
  progress_report r;
  r.job_id = "job-1";
  r.step = 1;
  h.add_progress(r);
  r.step = 2;
  h.add_progress(r);
  r.step = 3;
  r.held_before_step = 3;
  h.add_progress(r);
  REQUIRE(h.progress().count("job-1") == 1);
  CHECK(h.progress().at("job-1").size() == 2);
  CHECK(h.progress().at("job-1").back().step == 2);
}

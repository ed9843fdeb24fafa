// run.profile_steps: the summary of what a device did (busy, idle, the longest operations and
// idle gaps), and a job that profiles two stretches of its steps on the CPU.
#include "core/train/step_profiler.hpp"
#include "tests/core/train/engine_fixture.hpp"
#include "tests/core/train/workload_runs.hpp"

#include "tests/support/catch_torch.hpp"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/support/files.hpp"

using namespace cohort;
using cohort::test::temp_dir;
using core::train::profiled_span;

namespace {

constexpr std::int64_t ms = 1000000;  // nanoseconds

const core::train::profile_summary::operation* find_operation(const core::train::profile_summary& s,
                                                              const std::string& name) {
  for (const auto& o : s.operations)
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace

TEST_CASE(
    "a profile's summary counts overlapping spans once, cuts them to the window and names each "
    "idle gap by what came before and after it",
    "[core][train]") {
  const std::vector<profiled_span> spans{{-5 * ms, 5 * ms, "void early"},
                                         {10 * ms, 20 * ms, "a"},
                                         {15 * ms, 30 * ms, "b"},
                                         {40 * ms, 50 * ms, "a"},
                                         {70 * ms, 80 * ms, "after the window"}};
  const auto s = core::train::summarize_profile(spans, 0, 65 * ms, 4, 5);
  CHECK(s.first_step == 4);
  CHECK(s.last_step == 5);
  CHECK(s.window_ms == Approx(65));
  // Busy: 0-5, 10-30, 40-50 = 35 ms over two steps; idle 30 ms.
  CHECK(s.busy_ms_per_step == Approx(17.5));
  CHECK(s.idle_ms_per_step == Approx(15));
  CHECK(s.idle_share == Approx(30.0 / 65));
  REQUIRE(s.operations.size() == 3);  // the span after the window is not counted
  CHECK(s.operations[0].name == "a");
  CHECK(s.operations[0].calls_per_step == Approx(1));
  CHECK(s.operations[0].ms_per_step == Approx(10));
  CHECK(s.operations[0].share == Approx(20.0 / 40));
  const auto* early = find_operation(s, "early");  // "void " dropped, cut at the window's start
  REQUIRE(early != nullptr);
  CHECK(early->ms_per_step == Approx(2.5));
  REQUIRE(s.idle_gaps.size() == 3);
  CHECK(s.idle_gaps[0].between == "a -> (steps end)");  // 50-65
  CHECK(s.idle_gaps[0].ms_per_step == Approx(7.5));
  CHECK(s.idle_gaps[1].between == "b -> a");      // 30-40
  CHECK(s.idle_gaps[2].between == "early -> a");  // 5-10
  CHECK(s.idle_gaps[2].gaps_per_step == Approx(0.5));

  const auto j = core::train::to_json(s);
  CHECK(j["idle_ms_per_step"].get<double>() == Approx(15));
  CHECK(j["operations"][0]["name"] == "a");
  CHECK(core::train::describe(s, "GPU").rfind(
            "the GPU was busy 17.5 ms and idle 15.0 ms a step (46.2% of 32.5 ms)", 0) == 0);
  const auto trace = core::train::chrome_trace(spans, 0, "GPU");
  REQUIRE(trace["traceEvents"].size() == spans.size() + 1);             // and the process's name
  CHECK(trace["traceEvents"][2]["ts"].get<double>() == Approx(10000));  // microseconds
  CHECK(trace["traceEvents"][2]["dur"].get<double>() == Approx(10000));
}

TEST_CASE("a window no span covers is idle from end to end", "[core][train]") {
  const auto s = core::train::summarize_profile({}, 100 * ms, 110 * ms, 1, 1);
  CHECK(s.busy_ms_per_step == Approx(0));
  CHECK(s.idle_ms_per_step == Approx(10));
  REQUIRE(s.idle_gaps.size() == 1);
  CHECK(s.idle_gaps[0].between == "(steps start) -> (steps end)");
  CHECK_THROWS_AS(core::train::summarize_profile({}, 10, 5, 1, 1), std::invalid_argument);
}

TEST_CASE(
    "a job with run.profile_steps writes a summary and a trace of each stretch of consecutive steps, "
    "with the torch operators the CPU ran, and says so in its log",
    "[core][train]") {
  temp_dir tmp;
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 1, 0, false);
  spec.train.max_steps = 6;
  spec.run.profile_steps = {2, 3, 5};
  const auto results = test::run_workload(spec, tmp.path("run"));
  REQUIRE(results[0].error_text() == "");
  const auto& log = results[0].value->log;
  for (const auto& [first, last] : {std::pair{2, 3}, std::pair{5, 5}}) {
    const auto stem = core::train::step_profiler::path_stem(tmp.path("run"), 0, first, last);
    INFO(stem);
    const auto summary = nlohmann::json::parse(test::read_file(stem + ".json"));
    CHECK(summary["first_step"] == first);
    CHECK(summary["last_step"] == last);
    const double busy = summary["busy_ms_per_step"], idle = summary["idle_ms_per_step"];
    CHECK(busy > 0);
    CHECK(idle >= 0);
    CHECK((busy + idle) * (last - first + 1) == Approx(summary["window_ms"].get<double>()));
    // The step's matrix products ran on the host, inside the window.
    const auto& ops = summary["operations"];
    CHECK(std::any_of(ops.begin(), ops.end(), [](const nlohmann::json& o) {
      const std::string name = o["name"];
      return name.find("mm") != std::string::npos && o["ms_per_step"].get<double>() > 0;
    }));
    const auto trace = nlohmann::json::parse(test::read_file(stem + ".trace.json"));
    CHECK(trace["traceEvents"].size() > ops.size());
    const std::string line =
        "rank 0 profiled steps " + std::to_string(first) + "-" + std::to_string(last) + ": the CPU was busy ";
    CHECK(std::any_of(log.begin(), log.end(), [&](const std::string& l) { return l.rfind(line, 0) == 0; }));
  }
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.path("run") + "/profile"))
    ++files;
  CHECK(files == 4);
}

TEST_CASE(
    "a stretch's recording starts a step before it, that step's operators are in neither its "
    "summary nor its trace, and another rank's profiler refused then says so once",
    "[core][train]") {
  temp_dir tmp;
  const auto a = torch::ones({8, 8});
  core::train::step_profiler profiler({3}, tmp.path("a"), 0, false);
  CHECK(profiler.before_step(1) == "");
  CHECK(profiler.after_step(1) == "");
  CHECK(profiler.before_step(2) == "");  // recording from here
  core::train::step_profiler other({3}, tmp.path("b"), 1, false);
  CHECK(other.before_step(2) ==
        "rank 1 cannot profile steps 3-3: another rank of this process is profiling (run.profile_steps)");
  torch::mm(a, a);  // step 2's work
  CHECK(profiler.after_step(2) == "");
  CHECK(profiler.before_step(3) == "");
  CHECK(other.before_step(3) == "");  // said once
  torch::add(a, a);  // step 3's
  CHECK(profiler.after_step(3).rfind("rank 0 profiled steps 3-3: the CPU was busy", 0) == 0);
  const auto stem = core::train::step_profiler::path_stem(tmp.path("a"), 0, 3, 3);
  const auto summary = nlohmann::json::parse(test::read_file(stem + ".json"));
  const auto named = [](const nlohmann::json& items, const std::string& part) {
    return std::any_of(items.begin(), items.end(), [&](const nlohmann::json& o) {
      return o.contains("name") && o["name"].get<std::string>().find(part) != std::string::npos;
    });
  };
  CHECK(named(summary["operations"], "add"));
  CHECK_FALSE(named(summary["operations"], "mm"));
  const auto trace = nlohmann::json::parse(test::read_file(stem + ".trace.json"))["traceEvents"];
  CHECK(named(trace, "add"));
  CHECK_FALSE(named(trace, "mm"));
  for (const auto& e : trace)
    if (e.contains("ts")) CHECK(e["ts"].get<double>() >= 0);
}

TEST_CASE("a second profiler of one process says it cannot profile while the first records",
          "[core][train]") {
  temp_dir tmp;
  core::train::step_profiler first({1}, tmp.path("a"), 0, false), second({1, 2}, tmp.path("b"), 1, false);
  REQUIRE(first.before_step(1) == "");
  CHECK(second.before_step(1) ==
        "rank 1 cannot profile steps 1-2: another rank of this process is profiling (run.profile_steps)");
  CHECK(second.after_step(2) == "");
  torch::mm(torch::ones({8, 8}), torch::ones({8, 8}));
  CHECK(first.after_step(1).rfind("rank 0 profiled steps 1-1: the CPU was busy", 0) == 0);
  CHECK(std::filesystem::exists(core::train::step_profiler::path_stem(tmp.path("a"), 0, 1, 1) + ".json"));
  CHECK_FALSE(std::filesystem::exists(tmp.path("b") + "/profile"));
  // Free again: the second one records its next stretch.
  core::train::step_profiler third({3}, tmp.path("c"), 2, false);
  CHECK(third.before_step(3) == "");
  CHECK(third.after_step(3).rfind("rank 2 profiled steps 3-3", 0) == 0);
}

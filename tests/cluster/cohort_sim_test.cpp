// cohort-sim against a real cluster-head: every simulated node registers and every job it submits
// is placed on a simulated node and succeeds, and its --json report parses (counts, not timings).
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/proc/child_process.hpp"

namespace {

struct finished_run {
  bool ended = false;
  int exit_code = -1;
  std::vector<std::string> lines;
};

// Runs cohort-sim with `args` to its end (or kills it after `timeout`); its output, line by line.
finished_run run_sim(const std::vector<std::string>& args, std::chrono::seconds timeout) {
  const char* bin = std::getenv("COHORT_BIN");
  REQUIRE(bin != nullptr);
  std::vector<std::string> argv{std::string(bin) + "/cohort-sim"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::mutex mutex;
  std::condition_variable changed;
  finished_run run;
  {
    cohort::core::proc::child_process sim(
        argv, {},
        [&](const std::string& line) {
          std::lock_guard<std::mutex> lock(mutex);
          run.lines.push_back(line);
        },
        [&](const cohort::core::proc::exit_status& status) {
          std::lock_guard<std::mutex> lock(mutex);
          run.ended = true;
          run.exit_code = status.signaled ? -status.signal : status.code;
          changed.notify_all();
        });
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait_for(lock, timeout, [&] { return run.ended; });
  }  // a run past its timeout is killed here
  return run;
}

}  // namespace

TEST_CASE("cohort-sim's simulated nodes register with a real head and see every job it places through to success",
          "[cluster]") {
  const auto run = run_sim({"--nodes", "20", "--slots-per-node", "4", "--jobs", "2", "--jobs-per-s",
                            "2", "--job-workers", "12", "--seconds", "1", "--queries-per-s", "4",
                            "--json"},
                           std::chrono::seconds(300));
  std::string output, report_line;
  for (const auto& line : run.lines) {
    output += line + "\n";
    if (!line.empty() && line.front() == '{') report_line = line;
  }
  INFO(output);
  REQUIRE(run.ended);
  CHECK(run.exit_code == 0);
  REQUIRE_FALSE(report_line.empty());
  const auto report = nlohmann::json::parse(report_line);
  CHECK(report.at("nodes") == 20);
  CHECK(report.at("nodes_registered_at_end") == 20);
  CHECK(report.at("jobs_submitted") == 2);
  CHECK(report.at("submit_errors") == 0);
  CHECK(report.at("jobs_succeeded") == 2);
  CHECK(report.at("start_trainers_seen") == 2);
  CHECK(report.at("placement").at("count") == 2);
  CHECK(report.at("head_cpu_cores").get<double>() >= 0);
}

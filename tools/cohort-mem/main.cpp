// cohort-mem: reads runs' memory status logs (run.memory_status_every_s); `compare` sets two side by side.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/train/memory_report.hpp"

namespace {

const char* const usage =
    "usage: cohort-mem compare [--json] RUN_A RUN_B\n"
    "  Per rank, the peak and mean host RSS and GPU memory (allocated, reserved) of two runs\n"
    "  started with run.memory_status_every_s > 0, from RUN/memory/rank-N.csv (MiB; --json: bytes).\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(usage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "compare") {
    std::fprintf(stderr, "cohort-mem: unknown command \"%s\"\n%s", args[0].c_str(), usage);
    return 2;
  }
  bool json = false;
  std::vector<std::string> runs;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--json") json = true;
    else if (args[i].rfind("--", 0) == 0) {
      std::fprintf(stderr, "cohort-mem: unknown option %s\n%s", args[i].c_str(), usage);
      return 2;
    } else runs.push_back(args[i]);
  }
  if (runs.size() != 2) {
    std::fprintf(stderr, "cohort-mem compare: expected two run directories, got %zu\n%s", runs.size(), usage);
    return 2;
  }
  try {
    const std::string out = cohort::core::train::compare_memory(runs[0], runs[1], json);
    std::fwrite(out.data(), 1, out.size(), stdout);
  } catch (const cohort::core::train::memory_report_error& e) {
    std::fprintf(stderr, "cohort-mem: %s\n", e.what());
    return 1;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

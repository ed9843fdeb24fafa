// Reading runs' memory status logs (<run>/memory/rank-N.csv, memory_status.hpp) back and setting
// two runs side by side: what `cohort-mem compare` prints. No torch here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cohort::core::train {

// A run directory or memory file that cannot be read; what() names the file (and line).
class memory_report_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct memory_figure {
  std::int64_t peak = 0;  // bytes
  double mean = 0;        // bytes
};

// One rank's samples summed up. rss: peak of rss_peak_bytes, mean of rss_bytes. gpu_allocated:
// peak of gpu_peak_bytes, mean of gpu_allocated_bytes. gpu_reserved: peak and mean of
// gpu_reserved_bytes. The GPU figures are absent when the rank's rows have no GPU columns.
struct rank_memory_summary {
  std::int64_t samples = 0;
  memory_figure rss;
  std::optional<memory_figure> gpu_allocated;
  std::optional<memory_figure> gpu_reserved;
};

// One row of a rank's memory CSV.
struct memory_sample {
  double wall_time = 0;  // Unix seconds
  std::int64_t step = 0;  // the last completed step
  std::int64_t rss_bytes = 0;
  std::int64_t rss_peak_bytes = 0;
  struct gpu_bytes {
    std::int64_t allocated_bytes = 0, reserved_bytes = 0, peak_bytes = 0;
  };
  std::optional<gpu_bytes> gpu;  // absent on a CPU rank (the GPU columns empty)
};

// The rows of one rank-N.csv, in file order. Throws memory_report_error naming file and line for
// a wrong header, a row without 7 columns, a number that does not parse, GPU columns only partly
// given.
std::vector<memory_sample> read_memory_samples(const std::string& path);
// Every rank-N.csv of <run_dir>/memory by rank, row by row; throws as read_run_memory.
std::map<int, std::vector<memory_sample>> read_run_memory_samples(const std::string& run_dir);

// Every rank-N.csv of <run_dir>/memory, by rank. Throws memory_report_error for a missing run
// directory, a missing or empty memory/ folder, or a malformed file (wrong header, a row without
// 7 columns, a number that does not parse, GPU columns only partly given), naming file and line.
std::map<int, rank_memory_summary> read_run_memory(const std::string& run_dir);

// `cohort-mem compare`: per rank, each figure of run a and run b side by side (MiB, one decimal;
// "-" where a run has no such figure), or (as_json) the same in bytes as JSON. Throws what
// read_run_memory throws.
std::string compare_memory(const std::string& run_a, const std::string& run_b, bool as_json);

}  // namespace cohort::core::train

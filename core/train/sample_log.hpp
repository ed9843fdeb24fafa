// run.sample_log: each rank appends, after every step it ran, the data set indices it consumed in
// that step to <run>/samples/rank-N.jsonl as {"attempt", "step", "samples"}. Lines are never
// rewritten: a step redone after a resume appears again, written by the later attempt, and
// core/data/sample_audit.hpp decides which lines survive. One per rank per attempt, used by the
// rank's thread; each line is one append(2) write, so a killed rank leaves whole lines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::core::train {

class sample_log {
 public:
  // Creates <run_dir>/samples/ and opens rank `rank`'s file for appending. Throws
  // std::runtime_error naming the file when it cannot.
  sample_log(const std::string& run_dir, int rank, int attempt);
  ~sample_log();
  sample_log(const sample_log&) = delete;
  sample_log& operator=(const sample_log&) = delete;

  // Appends the line of 1-based step `step`. Throws std::runtime_error when the write fails.
  void append(std::int64_t step, const std::vector<std::int64_t>& samples);

  static std::string path(const std::string& run_dir, int rank);

 private:
  std::string path_;
  int attempt_;
  int fd_ = -1;
};

}  // namespace cohort::core::train

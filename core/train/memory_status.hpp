// A rank's memory status log (run.memory_status_every_s): <run>/memory/rank-N.csv, one row per
// sample of host RSS and GPU memory, taken every every_s seconds on a thread of its own and at
// every logged step on the rank's thread. The file is appended to across attempts (its header is
// written only when it is new). One per rank; at_step() is called by the rank's thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

namespace cohort::core::train {

// The CSV's header line (without the newline).
inline constexpr const char* memory_csv_header =
    "wall_time,step,rss_bytes,rss_peak_bytes,gpu_allocated_bytes,gpu_reserved_bytes,gpu_peak_bytes";

class memory_status_log {
 public:
  // Opens <run_dir>/memory/rank-<rank>.csv for appending and, with every_s > 0, starts the timed
  // sampler. `device`: the rank's CUDA device (-1: CPU; the GPU columns stay empty). `step`: the
  // last completed step (the resume point). Throws runtime_error naming the file.
  memory_status_log(const std::string& run_dir, int rank, int device, double every_s, std::int64_t step);
  ~memory_status_log();  // stops and joins the sampler
  memory_status_log(const memory_status_log&) = delete;
  memory_status_log& operator=(const memory_status_log&) = delete;

  // Records that `step` completed and writes a sample for it now. Rows never go back in step:
  // a timed sample carries the last step recorded before it.
  void at_step(std::int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_sample();  // under mutex_
  void sample_every();  // the sampler thread

  std::string path_;
  int device_;
  double every_s_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::int64_t step_;
  std::ofstream out_;
  std::thread sampler_;
};

}  // namespace cohort::core::train

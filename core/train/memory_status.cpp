// memory_status_log: the per-rank memory CSV and its sampler thread (see memory_status.hpp).
#include "core/train/memory_status.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "core/train/device_memory.hpp"
#include "core/train/event_file.hpp"

namespace cohort::core::train {

memory_status_log::memory_status_log(const std::string& run_dir, int rank, int device, double every_s,
                                     std::int64_t step)
    : device_(device), every_s_(every_s), step_(step) {
  namespace fs = std::filesystem;
  const std::string dir = run_dir + "/memory";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create memory status directory " + dir + ": " + ec.message());
  path_ = dir + "/rank-" + std::to_string(rank) + ".csv";
  const bool fresh = !fs::exists(path_) || fs::file_size(path_, ec) == 0;
  out_.open(path_, std::ios::app);
  if (!out_) throw std::runtime_error("cannot write memory status file " + path_);
  if (fresh) out_ << memory_csv_header << '\n';
  out_.flush();
  if (every_s_ > 0) sampler_ = std::thread([this] { sample_every(); });
}

memory_status_log::~memory_status_log() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

void memory_status_log::at_step(std::int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_ = step;
  write_sample();
}

void memory_status_log::write_sample() {
  const auto m = read_memory_now(device_);
  char wall[32];
  std::snprintf(wall, sizeof wall, "%.3f", unix_seconds_now());
  out_ << wall << ',' << step_ << ',' << m.host_rss << ',' << m.host_rss_peak << ',';
  if (m.gpu) out_ << m.gpu_allocated << ',' << m.gpu_reserved << ',' << m.gpu_peak;
  else out_ << ",,";
  out_ << '\n';
  out_.flush();  // a sample is on disk even if the rank dies next (a failed write is not fatal)
}

void memory_status_log::sample_every() {
  const auto period = std::chrono::duration<double>(every_s_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stop_; })) write_sample();
}

}  // namespace cohort::core::train

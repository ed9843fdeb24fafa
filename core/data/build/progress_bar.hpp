// A progress line on stderr for long builds: a redrawn bar on a terminal, a line every 30 s
// otherwise. Called from one thread.
#pragma once

#include <chrono>
#include <cstdint>

namespace cohort::core::data {

class progress_bar {
 public:
  progress_bar(std::uint64_t total_bytes, bool enabled);
  void update(std::uint64_t bytes_done, std::int64_t tokens_done);
  void finish(std::uint64_t bytes_done, std::int64_t tokens_done);

 private:
  void draw(std::uint64_t bytes_done, std::int64_t tokens_done, bool final);
  std::uint64_t total_;
  bool enabled_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace cohort::core::data

// sample_log: one O_APPEND write per step.
#include "core/train/sample_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace cohort::core::train {

std::string sample_log::path(const std::string& run_dir, int rank) {
  return run_dir + "/samples/rank-" + std::to_string(rank) + ".jsonl";
}

sample_log::sample_log(const std::string& run_dir, int rank, int attempt)
    : path_(path(run_dir, rank)), attempt_(attempt) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir + "/samples", ec);
  if (ec) throw std::runtime_error("run.sample_log: cannot create " + run_dir + "/samples: " + ec.message());
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("run.sample_log: cannot open " + path_ + ": " + std::strerror(errno));
}

sample_log::~sample_log() {
  if (fd_ >= 0) ::close(fd_);
}

void sample_log::append(std::int64_t step, const std::vector<std::int64_t>& samples) {
  const std::string line =
      nlohmann::json{{"attempt", attempt_}, {"step", step}, {"samples", samples}}.dump() + "\n";
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size()))
    throw std::runtime_error("run.sample_log: cannot append to " + path_ + ": " +
                             (n < 0 ? std::strerror(errno) : "short write"));
}

}  // namespace cohort::core::train

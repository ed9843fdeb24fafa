// raise_open_files_limit and the open-files estimate of a rank (open_files.hpp).
#include "core/proc/open_files.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

namespace cohort::core::proc {

namespace {

std::uint64_t as_count(rlim_t v) { return v == RLIM_INFINITY ? UINT64_MAX : static_cast<std::uint64_t>(v); }

std::string count_text(std::uint64_t n) { return n == UINT64_MAX ? "unlimited" : std::to_string(n); }

}  // namespace

open_files_limit raise_open_files_limit() {
  open_files_limit out;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) {
    out.error = std::string("getrlimit(RLIMIT_NOFILE): ") + std::strerror(errno);
    return out;
  }
  out.before = out.soft = as_count(lim.rlim_cur);
  out.hard = as_count(lim.rlim_max);
  if (lim.rlim_cur == lim.rlim_max) return out;
  rlimit raised = lim;
  raised.rlim_cur = lim.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    out.error = std::string("setrlimit(RLIMIT_NOFILE): ") + std::strerror(errno);
    return out;
  }
  out.soft = out.hard;
  return out;
}

std::string describe(const open_files_limit& limit) {
  if (limit.before == 0 && limit.hard == 0) return "open files: unknown (" + limit.error + ")";
  std::string text = "open files: " + count_text(limit.soft);
  if (limit.soft != limit.before)
    text += " (raised from " + count_text(limit.before) + ", the hard limit)";
  else if (limit.soft == limit.hard)
    text += " (the hard limit)";
  else
    text += " (hard limit " + count_text(limit.hard) + "; not raised: " + limit.error + ")";
  return text;
}

std::uint64_t open_files_per_rank(std::int64_t world_size) {
  const std::uint64_t peers = world_size > 1 ? static_cast<std::uint64_t>(world_size - 1) : 0;
  return 256 + 8 * peers;
}

std::optional<std::string> open_files_warning(std::uint64_t soft, std::int64_t world_size,
                                              const std::string& node) {
  const auto needed = open_files_per_rank(world_size);
  if (soft >= needed) return std::nullopt;
  return "node " + node + ": the open-files limit is " + count_text(soft) + ", below the about " +
         std::to_string(needed) + " a rank of a job of " + std::to_string(world_size) +
         " ranks may hold open; raise the hard limit of the user that runs cluster-worker there (`ulimit "
         "-Hn`, "
         "LimitNOFILE= in a systemd unit, nofile in /etc/security/limits.conf), or its connections may fail "
         "with \"Too many open files\"";
}

}  // namespace cohort::core::proc

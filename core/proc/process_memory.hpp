// The host memory a process holds, as the kernel counts it: what a node holds a worker process to
// when its job names scaling.resources_per_worker.memory (worker_process_actor.cpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace cohort::core::proc {

// The resident set of process `pid` in bytes (/proc/PID/statm: resident pages × the page size;
// shared library pages it touched included); nullopt when the process is gone or unreadable.
std::optional<std::uint64_t> resident_bytes(pid_t pid);

}  // namespace cohort::core::proc

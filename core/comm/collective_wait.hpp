// How long this process has been blocked waiting for a collective: the hang detector's way to
// tell a rank that waits on its peers from one that is stuck in its own work. Every blocking
// wait on a work handle (work::wait, core/train's wait_for) holds a collective_wait_scope; a
// heartbeat thread reads collective_wait_seconds(). Process-wide (one rank per process);
// lock-free, safe from any thread.
#pragma once

#include <optional>

namespace cohort::core::comm {

// Marks the calling thread as waiting for a collective for its lifetime (nesting and several
// waiting threads are fine: the wait began when the first of them began).
class collective_wait_scope {
 public:
  collective_wait_scope();
  ~collective_wait_scope();
  collective_wait_scope(const collective_wait_scope&) = delete;
  collective_wait_scope& operator=(const collective_wait_scope&) = delete;
};

// Seconds since this process began waiting for a collective; nullopt when it is not waiting.
std::optional<double> collective_wait_seconds();

}  // namespace cohort::core::comm

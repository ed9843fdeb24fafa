// The handle of one asynchronous collective (as c10d's Work) (see work.hpp).
#include "core/comm/work.hpp"

#include "core/comm/collective_wait.hpp"
#include "core/comm/comm_error.hpp"

#include <algorithm>

namespace cohort::core::comm {

work::work(std::string what) : what_(std::move(what)) {}

bool work::is_completed() {
  poll();
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

std::exception_ptr work::exception() {
  poll();
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

bool work::wait_finished(std::chrono::milliseconds slice) {
  const auto deadline = std::chrono::steady_clock::now() + slice;
  for (;;) {
    poll();
    std::unique_lock<std::mutex> lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (done_ || now >= deadline) return done_;
    const auto until = std::min<std::chrono::steady_clock::time_point>(deadline, now + poll_interval());
    if (done_cv_.wait_until(lock, until, [&] { return done_; })) return true;
  }
}

void work::wait(std::chrono::milliseconds timeout) {
  collective_wait_scope waiting;
  std::function<void(const std::string&)> on_timeout;
  bool timed_out = false;
  if (!wait_finished(timeout)) {
    std::lock_guard<std::mutex> lock(mutex_);
    timed_out = !done_;  // it may have finished right after the last look
    if (timed_out) on_timeout = on_timeout_;
  }
  if (!timed_out) {
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error = error_;
    }
    if (error) std::rethrow_exception(error);
    return;
  }
  const std::string message = what_ + " did not complete within " +
                              std::to_string(timeout.count()) + " ms";
  if (on_timeout) on_timeout(message);
  finish(std::make_exception_ptr(comm_error(comm_errc::timeout, message)));
  throw comm_error(comm_errc::timeout, message);
}

void work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

void work::set_on_timeout(std::function<void(const std::string&)> on_timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  on_timeout_ = std::move(on_timeout);
}

}  // namespace cohort::core::comm

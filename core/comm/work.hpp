// The handle of one asynchronous collective (as c10d's Work): poll it, wait for it with a
// timeout, read its error. Backends complete it from their worker / watchdog thread; any thread
// may wait on it. No torch here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>

namespace cohort::core::comm {

class work {
 public:
  // `what` names the operation, rank and group for error messages.
  explicit work(std::string what);
  virtual ~work() = default;
  work(const work&) = delete;
  work& operator=(const work&) = delete;

  const std::string& what() const { return what_; }
  // True once the operation finished, successfully or not. Never blocks.
  bool is_completed();
  // The operation's error once it failed; null while running or after success.
  std::exception_ptr exception();
  // Blocks until the operation finishes and rethrows its error (a comm_error). When it does not
  // finish within timeout the group is aborted (a stuck collective never recovers) and
  // comm_error (timeout) is thrown.
  void wait(std::chrono::milliseconds timeout);
  // Blocks until the operation finishes or `slice` passed, whichever is first; true if it
  // finished (then wait() returns or rethrows at once). Neither throws nor aborts: for callers
  // that look at something else (a cancel flag) between slices without spinning.
  bool wait_finished(std::chrono::milliseconds slice);
  // CUDA backends: makes the caller's current stream wait for the operation without blocking
  // the host (errors surface through wait() / exception()). Elsewhere the same as wait(timeout).
  virtual void wait_stream(std::chrono::milliseconds timeout) { wait(timeout); }

  // Backend side: marks the work finished (error null = success). Later calls are ignored.
  void finish(std::exception_ptr error = nullptr);
  // Backend side: called when wait() times out, before it throws (the group aborts itself).
  void set_on_timeout(std::function<void(const std::string&)> on_timeout);

 protected:
  // Lets a backend detect completion by looking (a CUDA event) while someone waits or polls;
  // called without the lock held. It calls finish() when the work is done.
  virtual void poll() {}
  // How often wait() calls poll(); backends that complete works themselves need no polling.
  virtual std::chrono::microseconds poll_interval() const { return std::chrono::milliseconds(100); }

 private:
  const std::string what_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::function<void(const std::string&)> on_timeout_;
};

}  // namespace cohort::core::comm

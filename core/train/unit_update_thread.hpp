// A thread of its own for the host's optimizer updates, so that they overlap the device's work: a
// step hands it one update per unit, run in unit order, and goes on at once; whoever reads a
// unit's results next (the next step's gather of the unit, a checkpoint) waits for that unit
// alone. The updates of one start() run one after another on this thread, each free to use
// torch's intra-op pool (at::parallel_for) with as many threads as the thread that made this
// object had. One owner thread calls start() and wait(); the updates must touch only what no one
// reads before waiting for them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace cohort::core::train {

class unit_update_thread {
 public:
  unit_update_thread();
  // Waits for the updates started, then ends the thread. (Neither copied nor moved: it holds a
  // mutex and its thread.)
  ~unit_update_thread();

  // Runs update(0), ..., update(count - 1) on the thread, in that order, after waiting for the
  // previous start()'s updates (whose failure, not yet seen by a wait, is dropped).
  void start(std::size_t count, std::function<void(std::size_t)> update);
  // Returns once update(u) of the last start() has returned; at once when nothing was started or
  // u is past its count. Rethrows the exception of the first update that threw, if it was at or
  // before u (the updates after it do not run).
  void wait(std::size_t u);
  void wait_all();
  // Seconds the last finished start()'s updates took on the thread, first to last.
  double last_busy_seconds() const;

 private:
  void run();

  const int threads_;  // torch's intra-op threads for the updates
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void(std::size_t)> update_;
  std::size_t count_ = 0;  // updates of the last start()
  std::size_t done_ = 0;   // of them finished (all of them once one failed)
  bool pending_ = false;   // started, not yet picked up by the thread
  bool stopping_ = false;
  std::exception_ptr failure_;
  std::size_t failed_at_ = 0;
  double busy_seconds_ = 0;
  std::thread thread_;  // last: starts once the rest is initialised
};

}  // namespace cohort::core::train

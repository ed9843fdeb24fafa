// Runs one worker's workload on a thread of its own (training steps block; CAF handlers must not).
// The worker actor owns a runner through a shared_ptr; the runner_registry of the process keeps
// every runner so their threads are joined before the process ends.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/messages.hpp"
#include "core/train/workload.hpp"

namespace cohort::actors {

class workload_runner {
 public:
  struct callbacks {
    std::function<void(const core::train::step_report&)> on_report;
    std::function<void(const std::string&)> on_log;
    std::function<void()> on_done;
    // The reason, and bad_input when the workload threw core::train::bad_input_error.
    std::function<void(const std::string&, failure_kind)> on_failed;
  };

  // Starts the thread at once. ctx.cancelled, ctx.signals and ctx.report/log are filled in by the
  // runner.
  workload_runner(core::train::worker_context ctx, callbacks cb);
  ~workload_runner();
  workload_runner(const workload_runner&) = delete;
  workload_runner& operator=(const workload_runner&) = delete;

  // Asks the workload to stop at its next check; returns at once.
  void cancel() { signals_.cancelled.store(true); }
  // What a worker process's command link does with a trainer's command (apply_command on this
  // runner's signals); returns at once. Any thread.
  void command(const worker_command& c);
  void join();
  // True once run() returned or threw.
  bool finished() const { return finished_.load(); }

 private:
  core::train::run_signals signals_;  // the workload's ctx.signals and ctx.cancelled
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

// Every runner of the process, so shutdown can cancel and join them all. Thread-safe.
class runner_registry {
 public:
  // Keeps the runner; joins and drops runners that have finished.
  void add(std::shared_ptr<workload_runner> runner);
  void cancel_and_join_all();

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<workload_runner>> runners_;
};

}  // namespace cohort::actors

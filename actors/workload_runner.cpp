// The worker's training thread (see workload_runner.hpp).
#include "actors/workload_runner.hpp"

#include <algorithm>
#include <exception>

#include "actors/worker_process_link.hpp"

namespace cohort::actors {

workload_runner::workload_runner(core::train::worker_context ctx, callbacks cb) {
  ctx.cancelled = &signals_.cancelled;
  ctx.signals = &signals_;
  ctx.report = cb.on_report;
  ctx.log = cb.on_log;
  thread_ = std::thread([this, ctx = std::move(ctx), cb = std::move(cb)] {
    try {
      auto work = core::train::make_workload(ctx.spec);
      work->run(ctx);
      cb.on_done();
    } catch (const core::train::cancelled_error&) {
      // Stopped on request: the worker is already gone, nobody waits for an outcome.
    } catch (const core::train::bad_input_error& e) {
      cb.on_failed(e.what(), failure_kind::bad_input);
    } catch (const std::exception& e) {
      cb.on_failed(e.what(), failure_kind::retryable);
    } catch (...) {
      cb.on_failed("unknown exception in the workload", failure_kind::retryable);
    }
    finished_.store(true);
  });
}

workload_runner::~workload_runner() {
  cancel();
  join();
}

void workload_runner::command(const worker_command& c) { apply_command(c, signals_); }

void workload_runner::join() {
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void runner_registry::add(std::shared_ptr<workload_runner> runner) {
  std::lock_guard<std::mutex> lock(mutex_);
  runners_.erase(std::remove_if(runners_.begin(), runners_.end(),
                                [](const auto& r) {
                                  if (!r->finished()) return false;
                                  r->join();
                                  return true;
                                }),
                 runners_.end());
  runners_.push_back(std::move(runner));
}

void runner_registry::cancel_and_join_all() {
  std::vector<std::shared_ptr<workload_runner>> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all.swap(runners_);
  }
  for (auto& r : all) r->cancel();
  for (auto& r : all) r->join();
}

}  // namespace cohort::actors

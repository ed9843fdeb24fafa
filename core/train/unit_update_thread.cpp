// unit_update_thread: one thread running a step's unit updates in order.
#include "core/train/unit_update_thread.hpp"

#include <chrono>

#include <ATen/Parallel.h>

namespace cohort::core::train {

unit_update_thread::unit_update_thread() : threads_(at::get_num_threads()), thread_([this] { run(); }) {}

unit_update_thread::~unit_update_thread() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !pending_ && done_ == count_; });
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void unit_update_thread::start(std::size_t count, std::function<void(std::size_t)> update) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !pending_ && done_ == count_; });
    update_ = std::move(update);
    count_ = count;
    done_ = 0;
    failure_ = nullptr;
    pending_ = true;
  }
  changed_.notify_all();
}

void unit_update_thread::wait(std::size_t u) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (u >= count_) u = count_ == 0 ? 0 : count_ - 1;
  changed_.wait(lock, [&] { return !pending_ && (count_ == 0 || done_ > u); });
  if (failure_ && failed_at_ <= u) std::rethrow_exception(failure_);
}

void unit_update_thread::wait_all() { wait(static_cast<std::size_t>(-1)); }

double unit_update_thread::last_busy_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_seconds_;
}

void unit_update_thread::run() {
  // A thread of torch's own gets the intra-op pool's default size; this one the owner's.
  at::init_num_threads();
  at::set_num_threads(threads_);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return pending_ || stopping_; });
    if (!pending_) return;  // stopping, nothing left to run
    pending_ = false;
    const auto update = update_;
    const std::size_t count = count_;
    lock.unlock();
    const auto started = std::chrono::steady_clock::now();
    for (std::size_t u = 0; u < count; ++u) {
      std::exception_ptr failure;
      try {
        update(u);
      } catch (...) {
        failure = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> guard(mutex_);
        done_ = failure ? count : u + 1;
        if (failure) {
          failure_ = failure;
          failed_at_ = u;
        }
      }
      changed_.notify_all();
      if (failure) break;
    }
    const double busy = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    lock.lock();
    busy_seconds_ = busy;
  }
}

}  // namespace cohort::core::train

// A value another thread hands over once (a callback's last call: a link's end, a child's exit),
// and the test thread's wait for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace cohort::test {

template <class T>
class final_word {
 public:
  // Called once by the other thread.
  void set(const T& v) {
    std::lock_guard<std::mutex> lock(m_);
    value = v;
    said_ = true;
    cv_.notify_all();
  }
  // True once set() was called, false after `limit` without it. After a true wait, `value` is
  // the one handed over.
  bool wait(std::chrono::seconds limit = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(m_);
    return cv_.wait_for(lock, limit, [this] { return said_; });
  }

  T value{};

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool said_ = false;
};

}  // namespace cohort::test

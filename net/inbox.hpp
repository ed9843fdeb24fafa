// A thread-safe queue that turns the socket loops' callbacks into blocking receives: pass
// `box.sink()` as a handler, then `box.pop(timeout)` on any thread (tests, the submit client).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace cohort::net {

template <class T>
class inbox {
public:
  void push(T item) {
    {
      std::lock_guard<std::mutex> lock{mutex_};
      items_.push_back(std::move(item));
    }
    ready_.notify_one();
  }

  // The oldest item, or nothing if none arrives within the timeout.
  std::optional<T> pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock{mutex_};
    if (!ready_.wait_for(lock, timeout, [this] { return !items_.empty(); }))
      return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  std::size_t size() const {
    std::lock_guard<std::mutex> lock{mutex_};
    return items_.size();
  }

  // A handler for wire_client (T = caf::message).
  auto sink() {
    return [this](auto&&... xs) { push(T{std::forward<decltype(xs)>(xs)...}); };
  }

private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<T> items_;
};

} // namespace cohort::net

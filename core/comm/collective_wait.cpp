// collective_wait_scope / collective_wait_seconds (see collective_wait.hpp).
#include "core/comm/collective_wait.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>

namespace cohort::core::comm {

namespace {

std::atomic<int> waiters{0};
std::atomic<std::int64_t> since_ns{0};  // steady clock, when waiters went from 0 to 1

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

collective_wait_scope::collective_wait_scope() {
  if (waiters.fetch_add(1) == 0) since_ns.store(now_ns());
}

collective_wait_scope::~collective_wait_scope() { waiters.fetch_sub(1); }

std::optional<double> collective_wait_seconds() {
  if (waiters.load() == 0) return std::nullopt;
  const auto since = since_ns.load();
  if (since == 0) return 0.0;  // the first waiter has not stored its start yet
  return static_cast<double>(now_ns() - since) / 1e9;
}

}  // namespace cohort::core::comm

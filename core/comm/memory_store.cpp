// An in-process store (a map under a mutex) (see memory_store.hpp).
#include "core/comm/memory_store.hpp"

#include "core/comm/comm_error.hpp"

#include <charconv>

namespace cohort::core::comm {

std::int64_t parse_counter(const std::string& key, const std::string& text) {
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    throw comm_error(comm_errc::store_failure,
                     "store: key '" + key + "' holds a non-integer value and cannot be add()ed to");
  return value;
}

void memory_store::set(const std::string& key, const std::string& value) {
  validate_store_key(key, "memory_store::set");
  validate_store_value(value, "memory_store::set");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    values_.put(key, value, "memory_store::set");
  }
  changed_.notify_all();
}

std::string memory_store::get(const std::string& key, std::chrono::milliseconds timeout) {
  validate_store_key(key, "memory_store::get");
  std::unique_lock<std::mutex> lock(mutex_);
  const bool found = changed_.wait_for(lock, timeout, [&] { return values_.contains(key); });
  if (!found)
    throw comm_error(comm_errc::timeout, "memory_store: key '" + key + "' was not set within " +
                                             std::to_string(timeout.count()) + " ms");
  return *values_.find(key);
}

std::int64_t memory_store::add(const std::string& key, std::int64_t delta) {
  validate_store_key(key, "memory_store::add");
  std::int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string* held = values_.find(key);
    result = (held == nullptr ? 0 : parse_counter(key, *held)) + delta;
    values_.put(key, std::to_string(result), "memory_store::add");
  }
  changed_.notify_all();
  return result;
}

bool memory_store::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& k : keys)
    if (!values_.contains(k)) return false;
  return true;
}

bool memory_store::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return values_.erase(key);
}

}  // namespace cohort::core::comm

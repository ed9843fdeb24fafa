// The rendezvous key-value store that bootstraps a collective group (see store.hpp).
#include "core/comm/store.hpp"

#include "core/comm/comm_error.hpp"

#include <algorithm>

namespace cohort::core::comm {

void store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& key : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    get(key, std::max(left, std::chrono::milliseconds(0)));
  }
}

void validate_store_key(const std::string& key, const char* where) {
  if (key.empty() || key.size() > max_store_key_bytes)
    throw comm_error(comm_errc::invalid_argument,
                     std::string(where) + ": key must have 1.." +
                         std::to_string(max_store_key_bytes) + " bytes (max_store_key_bytes), got " +
                         std::to_string(key.size()));
}

void validate_store_value(const std::string& value, const char* where) {
  if (value.size() > max_store_value_bytes)
    throw comm_error(comm_errc::invalid_argument,
                     std::string(where) + ": value of " + std::to_string(value.size()) +
                         " bytes exceeds the limit of " + std::to_string(max_store_value_bytes) +
                         " (max_store_value_bytes)");
}

void bounded_values::put(const std::string& key, std::string value, const char* where) {
  auto it = values_.find(key);
  const bool is_new = it == values_.end();
  if (is_new && values_.size() >= max_store_keys)
    throw comm_error(comm_errc::invalid_argument,
                     std::string(where) + ": cannot add key '" + key + "': the store holds " +
                         std::to_string(values_.size()) + " keys, the limit (max_store_keys) is " +
                         std::to_string(max_store_keys));
  const std::size_t held = is_new ? 0 : key.size() + it->second.size();
  const std::size_t after = bytes_ - held + key.size() + value.size();
  if (after > max_store_bytes)
    throw comm_error(comm_errc::invalid_argument,
                     std::string(where) + ": cannot store " + std::to_string(value.size()) +
                         " bytes under key '" + key + "': the store would hold " +
                         std::to_string(after) + " bytes, the limit (max_store_bytes) is " +
                         std::to_string(max_store_bytes));
  bytes_ = after;
  if (is_new)
    values_.emplace(key, std::move(value));
  else
    it->second = std::move(value);
}

const std::string* bounded_values::find(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

bool bounded_values::erase(const std::string& key) {
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  bytes_ -= key.size() + it->second.size();
  values_.erase(it);
  return true;
}

void store_barrier(store& s, const std::string& name, int world_size,
                   std::chrono::milliseconds timeout) {
  if (world_size < 1)
    throw comm_error(comm_errc::invalid_argument,
                     "store_barrier '" + name + "': world_size must be >= 1, got " +
                         std::to_string(world_size));
  const std::string arrived = name + "/arrived";
  const std::string done = name + "/done";
  if (s.add(arrived, 1) == world_size) s.set(done, "1");
  try {
    s.get(done, timeout);
  } catch (const comm_error& e) {
    if (e.code() != comm_errc::timeout) throw;
    throw comm_error(comm_errc::timeout,
                     "store_barrier '" + name + "': only " + std::to_string(s.add(arrived, 0)) +
                         " of " + std::to_string(world_size) + " ranks arrived within " +
                         std::to_string(timeout.count()) + " ms");
  }
}

prefix_store::prefix_store(std::shared_ptr<store> inner, std::string prefix)
    : inner_(std::move(inner)), prefix_(std::move(prefix)) {
  if (!inner_) throw comm_error(comm_errc::invalid_argument, "prefix_store: inner store is null");
}

void prefix_store::set(const std::string& key, const std::string& value) {
  inner_->set(prefix_ + key, value);
}
std::string prefix_store::get(const std::string& key, std::chrono::milliseconds timeout) {
  return inner_->get(prefix_ + key, timeout);
}
std::int64_t prefix_store::add(const std::string& key, std::int64_t delta) {
  return inner_->add(prefix_ + key, delta);
}
bool prefix_store::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(prefix_ + k);
  return inner_->check(full);
}
bool prefix_store::remove(const std::string& key) { return inner_->remove(prefix_ + key); }
void prefix_store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(prefix_ + k);
  inner_->wait(full, timeout);
}

}  // namespace cohort::core::comm

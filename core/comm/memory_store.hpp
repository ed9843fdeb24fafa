// An in-process store (a map under a mutex): rendezvous for ranks running as threads of one
// process, as in the tests. Share one instance (shared_ptr) between the ranks.
#pragma once

#include "core/comm/store.hpp"

#include <condition_variable>
#include <mutex>

namespace cohort::core::comm {

class memory_store final : public store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bounded_values values_;
};

// Parses a counter value written by add(); throws comm_error (store_failure) naming the key when
// the stored bytes are not a decimal integer. Shared by every store implementation.
std::int64_t parse_counter(const std::string& key, const std::string& text);

}  // namespace cohort::core::comm

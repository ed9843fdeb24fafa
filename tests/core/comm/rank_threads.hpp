// gloo-style harness for collective tests: runs one function per rank, each on its own thread,
// and returns what each rank produced. Exceptions are caught per rank (Catch2 assertions are
// not thread-safe, so ranks return data and the test asserts on the main thread).
#pragma once

#include "core/comm/memory_store.hpp"
#include "core/comm/process_group.hpp"

#include <atomic>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cohort::test {

template <typename R>
struct rank_result {
  std::optional<R> value;
  std::exception_ptr error;
  std::string error_text() const {
    if (!error) return "";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "non-std exception";
    }
  }
};

template <typename R>
std::vector<rank_result<R>> run_ranks(int world_size, const std::function<R(int rank)>& body) {
  std::vector<rank_result<R>> results(static_cast<std::size_t>(world_size));
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r)
    threads.emplace_back([&, r] {
      try {
        results[static_cast<std::size_t>(r)].value = body(r);
      } catch (...) {
        results[static_cast<std::size_t>(r)].error = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return results;
}

// Each rank's value, in rank order; runtime_error "rank failed: ..." for the first rank that threw.
template <typename R>
std::vector<R> values_of(std::vector<rank_result<R>>& results) {
  std::vector<R> values;
  for (auto& r : results) {
    if (r.error) throw std::runtime_error("rank failed: " + r.error_text());
    values.push_back(std::move(*r.value));
  }
  return values;
}

// A fresh key prefix per group so tests sharing a store never collide.
inline std::string unique_prefix(const std::string& name) {
  static std::atomic<int> counter{0};
  return name + "-" + std::to_string(counter++) + "/";
}

inline core::comm::group_options gloo_options(std::shared_ptr<core::comm::store> s, int rank,
                                              int world_size, const std::string& prefix,
                                              std::chrono::milliseconds timeout =
                                                  std::chrono::seconds(20)) {
  core::comm::group_options o;
  o.backend = core::comm::backend_kind::gloo;
  o.rank = rank;
  o.world_size = world_size;
  o.rendezvous = std::move(s);
  o.key_prefix = prefix;
  o.timeout = timeout;
  return o;
}

}  // namespace cohort::test

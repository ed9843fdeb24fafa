// The rendezvous key-value store that bootstraps a collective group (as c10d's Store): ranks
// publish addresses / NCCL ids under keys and wait for each other's. Implementations: in-memory
// (ranks as threads), TCP (served by the job's trainer) and a shared directory. No torch here.
// Every implementation is safe to call from several threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cohort::core::comm {

// Bounds every implementation enforces (the TCP wire relies on them); errors name the limit. A
// rendezvous store holds addresses, ids, counters and checkpoint reports (a few hundred KiB for
// the largest models), so a value is bounded to a few MiB, and so are the keys a store holds at
// once and the bytes it holds (key + value, summed over every key).
inline constexpr std::size_t max_store_key_bytes = 1024;
inline constexpr std::size_t max_store_value_bytes = 4u << 20;
inline constexpr std::size_t max_store_keys = 1u << 17;
inline constexpr std::size_t max_store_bytes = 256u << 20;

class store {
 public:
  virtual ~store() = default;

  // Stores value (any bytes) under key, replacing an earlier value; wakes every waiter on key.
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Returns key's value, waiting up to timeout for some rank to set it; throws comm_error
  // (timeout) naming the key when it does not appear in time.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer counter under key (absent = 0) and returns the new
  // value. The counter reads back through get() as decimal text.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // True when every key is set (does not wait).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Deletes key; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;

  // Waits until every key is set; throws comm_error (timeout) naming the first missing key.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
};

// Throws comm_error (invalid_argument) when key or value break the bounds above; `where` names
// the store for the message.
void validate_store_key(const std::string& key, const char* where);
void validate_store_value(const std::string& value, const char* where);

// The key -> value map a store serves from, kept within max_store_keys and max_store_bytes (the
// bytes it holds: key + value sizes, summed). Not thread-safe: its owner serialises access.
class bounded_values {
 public:
  // Stores value under key (replacing an earlier one). Throws comm_error (invalid_argument)
  // naming the key, `where` and the limit it would break; the map is unchanged then.
  void put(const std::string& key, std::string value, const char* where);
  const std::string* find(const std::string& key) const;  // nullptr when absent
  bool contains(const std::string& key) const { return values_.count(key) > 0; }
  bool erase(const std::string& key);
  std::size_t size() const { return values_.size(); }
  std::size_t bytes() const { return bytes_; }

 private:
  std::map<std::string, std::string> values_;
  std::size_t bytes_ = 0;
};

// Blocks until world_size callers have entered the barrier called `name` (each name is used
// once: put the attempt or step number in it). Throws comm_error (timeout) saying how many
// arrived.
void store_barrier(store& s, const std::string& name, int world_size,
                   std::chrono::milliseconds timeout);

// A view of another store with every key prefixed (e.g. "job-7/attempt-2/"), so that attempts
// of a job and groups within an attempt never see each other's keys.
class prefix_store final : public store {
 public:
  prefix_store(std::shared_ptr<store> inner, std::string prefix);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  std::shared_ptr<store> inner_;
  std::string prefix_;
};

}  // namespace cohort::core::comm

// The head's watch over the trainers of running attempts: which trainer (a handle the head
// monitors) runs which attempt of which job. A trainer announces itself (trainer_started) when it
// starts and again to every head that adopts it; the head watches at most one trainer per
// attempt, forgets it when the attempt ends here, and learns from a down which attempt lost its
// trainer. Plain and single-threaded (the head actor owns it); `Handle` is what the head commands
// and monitors (caf::actor), `Key` what a down names (caf::actor_addr), so tests use plain values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cohort::actors {

template <class Handle, class Key>
class attempt_watch {
 public:
  struct trainer_ref {
    std::string job_id;
    std::int32_t attempt = 0;
    Handle handle;
  };
  // What watch() did: nothing new (this trainer is watched already for the attempt), or watched
  // it, replacing `replaced` (another trainer watched for the same attempt: stop monitoring it).
  struct watch_result {
    bool already = false;
    std::optional<Handle> replaced;
  };

  watch_result watch(const Key& key, const std::string& job_id, std::int32_t attempt, const Handle& handle) {
    watch_result out;
    if (auto it = find(job_id, attempt); it != trainers_.end()) {
      if (it->second.handle == handle) {
        out.already = true;
        return out;
      }
      out.replaced = it->second.handle;
      trainers_.erase(it);
    }
    trainers_[key] = {job_id, attempt, handle};
    return out;
  }

  // The trainer watched for the attempt, if one announced itself to this head.
  std::optional<Handle> trainer(const std::string& job_id, std::int32_t attempt) const {
    auto it = find(job_id, attempt);
    if (it == trainers_.end()) return std::nullopt;
    return it->second.handle;
  }

  // Every trainer watched for any attempt of the job (a stop reaches each).
  std::vector<Handle> trainers_of(const std::string& job_id) const {
    std::vector<Handle> out;
    for (const auto& [key, ref] : trainers_)
      if (ref.job_id == job_id) out.push_back(ref.handle);
    return out;
  }

  // The attempt ended here: its trainer is no longer watched (returned: stop monitoring it).
  std::optional<Handle> forget(const std::string& job_id, std::int32_t attempt) {
    auto it = find(job_id, attempt);
    if (it == trainers_.end()) return std::nullopt;
    auto handle = it->second.handle;
    trainers_.erase(it);
    return handle;
  }

  // A monitored handle went down: the attempt it ran, when it was a watched trainer.
  std::optional<trainer_ref> on_down(const Key& key) {
    auto it = trainers_.find(key);
    if (it == trainers_.end()) return std::nullopt;
    auto ref = std::move(it->second);
    trainers_.erase(it);
    return ref;
  }

  std::size_t size() const { return trainers_.size(); }

 private:
  using map = std::map<Key, trainer_ref>;
  typename map::const_iterator find(const std::string& job_id, std::int32_t attempt) const {
    for (auto it = trainers_.begin(); it != trainers_.end(); ++it)
      if (it->second.job_id == job_id && it->second.attempt == attempt) return it;
    return trainers_.end();
  }
  typename map::iterator find(const std::string& job_id, std::int32_t attempt) {
    for (auto it = trainers_.begin(); it != trainers_.end(); ++it)
      if (it->second.job_id == job_id && it->second.attempt == attempt) return it;
    return trainers_.end();
  }

  map trainers_;
};

}  // namespace cohort::actors

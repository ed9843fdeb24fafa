// The head's links to its nodes: the node actor that speaks for each registered node name (what
// the head commands) and, for the downs it monitors, which name a handle stood for. A node that
// says hello again from a new process replaces its predecessor (returned, so that the head stops
// monitoring it and ends what was sent to it); a node that falls silent or goes down is forgotten.
// The nodes' records (resources, drain marks) are head_state's. Plain and single-threaded (the
// head actor owns it); `Handle` is caf::actor and `Key` caf::actor_addr in the head, plain values
// in tests.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace cohort::actors {

template <class Handle, class Key>
class node_registry {
 public:
  // Node `name` said hello from `handle`: the handle it had before, when that was another one.
  std::optional<Handle> join(const std::string& name, const Key& key, const Handle& handle) {
    std::optional<Handle> predecessor;
    if (auto old = by_name_.find(name); old != by_name_.end() && !(old->second.handle == handle)) {
      by_key_.erase(old->second.key);
      predecessor = old->second.handle;
    }
    by_name_[name] = {handle, key};
    by_key_[key] = name;
    return predecessor;
  }

  // The handle that speaks for node `name` now.
  std::optional<Handle> find(const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return std::nullopt;
    return it->second.handle;
  }

  // Whether `handle` speaks for node `name` now (only the node itself may say it leaves).
  bool speaks_for(const std::string& name, const Handle& handle) const {
    auto it = by_name_.find(name);
    return it != by_name_.end() && it->second.handle == handle;
  }

  // Node `name` fell silent: its handle's down, still to come, names no node any more; the
  // handle is returned (stop monitoring it). Its name stays until forget().
  std::optional<Handle> silent(const std::string& name) {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return std::nullopt;
    by_key_.erase(it->second.key);
    return it->second.handle;
  }

  // A monitored handle went down: the node it spoke for, if it still did. Its key is forgotten.
  std::optional<std::string> on_down(const Key& key) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return std::nullopt;
    auto name = std::move(it->second);
    by_key_.erase(it);
    return name;
  }

  // Node `name` is lost: no handle speaks for it.
  void forget(const std::string& name) {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return;
    if (auto k = by_key_.find(it->second.key); k != by_key_.end() && k->second == name) by_key_.erase(k);
    by_name_.erase(it);
  }

 private:
  struct link {
    Handle handle;
    Key key;
  };
  std::map<std::string, link> by_name_;
  std::map<Key, std::string> by_key_;
};

}  // namespace cohort::actors

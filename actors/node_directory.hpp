// Finds the actor of a node by name, for a trainer that starts workers on other nodes. In one
// process it maps names to node actors; in a cluster-worker it hands out proxies of remote nodes.
// Thread-safe: trainers on any scheduler thread look nodes up.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include <caf/actor.hpp>

namespace cohort::actors {

class node_directory {
 public:
  virtual ~node_directory() = default;
  // The node's actor, or an invalid handle when the node is unknown.
  virtual caf::actor find(const std::string& name) = 0;
};

// The directory of an embedded cluster: every node lives in this process.
class local_node_directory final : public node_directory {
 public:
  void put(const std::string& name, caf::actor node) {
    std::lock_guard<std::mutex> lock(mutex_);
    nodes_[name] = std::move(node);
  }
  void remove(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    nodes_.erase(name);
  }
  caf::actor find(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = nodes_.find(name);
    return it == nodes_.end() ? caf::actor{} : it->second;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, caf::actor> nodes_;
};

}  // namespace cohort::actors

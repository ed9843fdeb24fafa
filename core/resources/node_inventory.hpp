// What one cluster node has: its total resources, what is still free, and whether it is alive.
// The head keeps one per registered node and reserves/releases placements on them. Plain value;
// not thread-safe (the head's state is touched by one actor).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/nodes_spec.hpp"
#include "core/resources/resource_set.hpp"

namespace cohort::core::resources {

class node_inventory {
 public:
  // All of total starts free.
  node_inventory(std::string name, resource_set total);
  explicit node_inventory(const config::node_spec& spec);

  const std::string& name() const { return name_; }
  const resource_set& total() const { return total_; }
  const resource_set& available() const { return available_; }
  bool alive() const { return alive_; }
  // Memory of one of the node's GPUs in bytes (the smallest when they differ); 0 = unknown.
  std::int64_t gpu_memory_bytes() const { return gpu_memory_bytes_; }
  void set_gpu_memory_bytes(std::int64_t bytes) { gpu_memory_bytes_ = bytes; }
  void set_alive(bool alive) { alive_ = alive; }

  bool can_reserve(const resource_set& need) const { return alive_ && need.fits_in(available_); }
  // Takes need from what is free. Throws resource_error naming the node and what is missing (or
  // that the node is dead); nothing changes then.
  void reserve(const resource_set& need);
  // Gives back what an earlier reserve took. Throws resource_error when that would free more than
  // the node has in total; nothing changes then.
  void release(const resource_set& freed);

 private:
  std::string name_;
  resource_set total_;
  resource_set available_;
  bool alive_ = true;
  std::int64_t gpu_memory_bytes_ = 0;
};

// One inventory per node of a NODES.json list, everything free.
std::vector<node_inventory> inventories_from_specs(const std::vector<config::node_spec>& specs);

}  // namespace cohort::core::resources

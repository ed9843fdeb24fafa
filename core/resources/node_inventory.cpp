// What one cluster node has: total, free, alive (see node_inventory.hpp).
#include "core/resources/node_inventory.hpp"

namespace cohort::core::resources {

node_inventory::node_inventory(std::string name, resource_set total)
    : name_(std::move(name)), total_(total), available_(std::move(total)) {}

node_inventory::node_inventory(const config::node_spec& spec)
    : node_inventory(spec.name, resource_set(spec.resources)) {
  gpu_memory_bytes_ = spec.gpu_memory_bytes;
}

void node_inventory::reserve(const resource_set& need) {
  if (!alive_) {
    throw resource_error("cannot reserve " + need.to_string() + " on node " + name_ +
                         ": the node is dead");
  }
  const auto missing = shortfalls(need, available_);
  if (!missing.empty()) {
    throw resource_error("cannot reserve " + need.to_string() + " on node " + name_ +
                         ": missing " + describe(missing));
  }
  available_ -= need;
}

void node_inventory::release(const resource_set& freed) {
  resource_set after = available_ + freed;
  const auto excess = shortfalls(after, total_);
  if (!excess.empty()) {
    throw resource_error("cannot release " + freed.to_string() + " on node " + name_ +
                         ": that would free more than the node's total " + total_.to_string() +
                         " (releasing what was never reserved?)");
  }
  // Snap quantities that are equal to the total within tolerance back onto it.
  resource_set snapped;
  for (const auto& [name, value] : after.quantities()) {
    const double total = total_.get(name);
    snapped += resource_set({{name, value > total ? total : value}});
  }
  available_ = snapped;
}

std::vector<node_inventory> inventories_from_specs(const std::vector<config::node_spec>& specs) {
  std::vector<node_inventory> out;
  out.reserve(specs.size());
  for (const auto& spec : specs) out.emplace_back(spec);
  return out;
}

}  // namespace cohort::core::resources

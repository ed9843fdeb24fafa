// The order in which ZeRO-3's units keep their compute-dtype shard on the GPU between updates
// under offload_param, shared by the optimizer (zero_options::param_shard_units_kept_on_device:
// the first n units of this order keep theirs) and the memory plan that picks n
// (memory_estimate::param_shard_units_kept_on_device).
#pragma once

#include <cstddef>

namespace cohort::core::train {

// Unit u's place (0 first) among `units` units: the layers' units 1..L in order, then unit 0,
// which the engine gathers once a step and holds through it (its one gather after an update
// copies from the host either way: it gains the least).
constexpr std::size_t shard_keep_position(std::size_t u, std::size_t units) {
  return u == 0 ? units - 1 : u - 1;
}

}  // namespace cohort::core::train

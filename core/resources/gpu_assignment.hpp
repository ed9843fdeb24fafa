// GPU isolation: which of a node's GPUs each worker bundle of a placed job gets. A node's offered
// GPUs are indices 0..N-1 (into the node's own GPU list); placement counts GPUs as a quantity and
// this unit turns that count into indices, so two jobs never share a GPU. Rules (Ray's):
//   - a bundle of k whole GPUs (k = 1, 2, ...) gets k GPUs nobody uses, lowest indices first;
//   - a bundle of a fraction f < 1 gets one GPU with at least f left, preferring the one with the
//     least left (fractions pack onto shared GPUs before they start a fresh one); bundles that
//     share a GPU see the same index;
//   - quantities above 1 must be whole (the job spec enforces it).
// Fractions can fragment: 3 bundles of 0.6 GPU fit 2 GPUs by count but not by index; then the
// assignment fails and the job waits like one that does not fit. Plain values; the head's state
// owns the pools (one actor, one thread).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/resources/placement.hpp"

namespace cohort::core::resources {

// Per rank of a job, the GPU indices on its node (empty: no GPU).
using rank_gpu_indices = std::vector<std::vector<std::int32_t>>;

class gpu_pool {
 public:
  gpu_pool() = default;
  explicit gpu_pool(std::int32_t count);

  std::int32_t size() const { return static_cast<std::int32_t>(used_.size()); }
  // The share of GPU `index` in use, 0..1.
  double used(std::int32_t index) const { return used_.at(static_cast<std::size_t>(index)); }

  // Indices for a bundle asking for `gpus` (rules above); empty for 0; nullopt when no such
  // GPUs are free now. Throws resource_error for a quantity above 1 that is not whole.
  std::optional<std::vector<std::int32_t>> take(double gpus);
  // Takes the given indices for a bundle of `gpus` (a placement made before, e.g. by an earlier
  // head). Throws resource_error, changing nothing, when one is out of range or not free enough.
  void take_exact(const std::vector<std::int32_t>& indices, double gpus);
  // Gives back what take/take_exact gave; indices beyond this pool (a node that came back
  // smaller) are skipped.
  void give_back(const std::vector<std::int32_t>& indices, double gpus);

 private:
  std::vector<double> used_;
};

// Assigns every rank of `plan` its GPUs from the pools of its node (by name), all or nothing.
// nullopt with `why` set when a node's free GPUs cannot hold its ranks by index (fragmented
// fractions); a node without a pool counts as having no GPUs.
std::optional<rank_gpu_indices> assign_gpus(const placement& plan,
                                            std::map<std::string, gpu_pool>& pools,
                                            std::string& why);
// Gives back what assign_gpus (or take_gpus) took, on the nodes that still have pools.
void release_gpus(const placement& plan, const rank_gpu_indices& gpus,
                  std::map<std::string, gpu_pool>& pools);
// Takes a known assignment again for the ranks placed on `node` (a node that registers again).
void take_gpus_on(const std::string& node, const placement& plan, const rank_gpu_indices& gpus,
                  gpu_pool& pool);

}  // namespace cohort::core::resources

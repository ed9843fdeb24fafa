// Whole and fractional GPUs as indices (see gpu_assignment.hpp).
#include "core/resources/gpu_assignment.hpp"

#include <cmath>

namespace cohort::core::resources {
namespace {

constexpr double eps = 1e-9;

bool whole(double gpus) { return std::fabs(gpus - std::round(gpus)) <= eps; }

// What one index of a bundle of `gpus` takes: 1 for whole GPUs, the fraction otherwise.
double share_of(double gpus) {
  if (gpus > 1 + eps && !whole(gpus))
    throw resource_error("a bundle of " + format_quantity(gpus) +
                         " GPUs cannot be assigned: above 1, GPU counts must be whole");
  return whole(gpus) ? 1.0 : gpus;
}

std::int32_t count_of(double gpus) {
  return whole(gpus) ? static_cast<std::int32_t>(std::lround(gpus)) : 1;
}

}  // namespace

gpu_pool::gpu_pool(std::int32_t count)
    : used_(static_cast<std::size_t>(count > 0 ? count : 0), 0.0) {}

std::optional<std::vector<std::int32_t>> gpu_pool::take(double gpus) {
  if (gpus <= eps) return std::vector<std::int32_t>{};
  const double share = share_of(gpus);
  std::vector<std::int32_t> out;
  if (share == 1.0) {
    const std::int32_t want = count_of(gpus);
    for (std::int32_t i = 0; i < size() && static_cast<std::int32_t>(out.size()) < want; ++i)
      if (used_[static_cast<std::size_t>(i)] <= eps) out.push_back(i);
    if (static_cast<std::int32_t>(out.size()) < want) return std::nullopt;
  } else {
    std::int32_t best = -1;
    for (std::int32_t i = 0; i < size(); ++i) {
      const double left = 1.0 - used_[static_cast<std::size_t>(i)];
      if (left + eps < share) continue;
      if (best < 0 || left < 1.0 - used_[static_cast<std::size_t>(best)] - eps) best = i;
    }
    if (best < 0) return std::nullopt;
    out.push_back(best);
  }
  for (auto i : out) used_[static_cast<std::size_t>(i)] += share;
  return out;
}

void gpu_pool::take_exact(const std::vector<std::int32_t>& indices, double gpus) {
  const double share = share_of(gpus);
  for (auto i : indices) {
    if (i < 0 || i >= size())
      throw resource_error("GPU index " + std::to_string(i) + " is not one of this node's " +
                           std::to_string(size()) + " GPUs");
    if (used_[static_cast<std::size_t>(i)] + share > 1.0 + eps)
      throw resource_error("GPU " + std::to_string(i) + " is already in use");
  }
  for (auto i : indices) used_[static_cast<std::size_t>(i)] += share;
}

void gpu_pool::give_back(const std::vector<std::int32_t>& indices, double gpus) {
  const double share = share_of(gpus);
  for (auto i : indices) {
    if (i < 0 || i >= size()) continue;
    double& u = used_[static_cast<std::size_t>(i)];
    u = u - share <= eps ? 0.0 : u - share;
  }
}

std::optional<rank_gpu_indices> assign_gpus(const placement& plan,
                                            std::map<std::string, gpu_pool>& pools,
                                            std::string& why) {
  std::map<std::string, gpu_pool> trial = pools;  // all or nothing
  rank_gpu_indices out(plan.rank_nodes.size());
  for (std::size_t r = 0; r < plan.rank_nodes.size(); ++r) {
    const double gpus = plan.rank_bundles.at(r).get("GPU");
    if (gpus <= eps) continue;
    const auto& node = plan.rank_nodes[r];
    auto got = trial[node].take(gpus);
    if (!got) {
      why = "rank " + std::to_string(r) + "'s " + format_quantity(gpus) + " GPU on node " + node +
            ": the node's free GPU shares add up but are spread over several GPUs";
      return std::nullopt;
    }
    out[r] = std::move(*got);
  }
  for (auto& [node, pool] : trial)
    if (pools.count(node) != 0) pools[node] = pool;
  return out;
}

void release_gpus(const placement& plan, const rank_gpu_indices& gpus,
                  std::map<std::string, gpu_pool>& pools) {
  for (std::size_t r = 0; r < plan.rank_nodes.size() && r < gpus.size(); ++r) {
    auto it = pools.find(plan.rank_nodes[r]);
    if (it != pools.end() && !gpus[r].empty())
      it->second.give_back(gpus[r], plan.rank_bundles.at(r).get("GPU"));
  }
}

void take_gpus_on(const std::string& node, const placement& plan, const rank_gpu_indices& gpus,
                  gpu_pool& pool) {
  for (std::size_t r = 0; r < plan.rank_nodes.size() && r < gpus.size(); ++r)
    if (plan.rank_nodes[r] == node && !gpus[r].empty())
      pool.take_exact(gpus[r], plan.rank_bundles.at(r).get("GPU"));
}

}  // namespace cohort::core::resources

// Placement of a job's bundles on cluster nodes with Ray's strategies (see placement.hpp).
#include "core/resources/placement.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <set>

#include <nlohmann/json.hpp>

namespace cohort::core::resources {
namespace {

using config::placement_strategy;

// Where rank 0 goes and how many of the identical bundles of ranks 1..N-1 each node takes.
struct assignment {
  std::size_t lead = 0;
  std::vector<std::int64_t> extra;
};

struct closest_node {
  std::size_t index = 0;
  std::vector<shortfall> missing;
};

// The node where need misses least: smallest sum over resources of missing / needed, then the
// node listed first. Nodes with skip[i] set are not considered.
std::optional<closest_node> find_closest(const resource_set& need, const std::vector<resource_set>& caps,
                                         const std::vector<bool>& skip) {
  std::optional<closest_node> best;
  double best_score = 0;
  for (std::size_t i = 0; i < caps.size(); ++i) {
    if (skip[i]) continue;
    auto missing = shortfalls(need, caps[i]);
    double score = 0;
    for (const auto& s : missing) score += s.missing() / s.needed;
    if (!best || score < best_score) {
      best = closest_node{i, std::move(missing)};
      best_score = score;
    }
  }
  return best;
}

// Solves one capacity view (free or total resources) of the alive nodes exactly: every kind of
// node is tried for rank 0, and for each the identical worker bundles are counted per node.
class solver {
 public:
  using score_t = std::pair<std::int64_t, std::int64_t>;  // compared lexicographically

  solver(const std::vector<std::string>& names, const config::scaling_spec& scaling)
      : names_(names),
        worker_(scaling.resources_per_worker),
        trainer_(scaling.trainer_resources),
        lead_(worker_ + trainer_),
        rest_(scaling.num_workers - 1),
        strategy_(scaling.strategy) {}

  // The assignment, or nullopt with why_ set to an explanation.
  std::optional<assignment> solve(const std::vector<resource_set>& caps) {
    std::optional<assignment> best;
    score_t best_score;
    std::optional<std::pair<assignment, std::vector<std::int64_t>>> best_partial;
    std::int64_t best_placed = -1;
    // Each node's capacity in worker bundles, and the nodes by it (most first, then list order),
    // once: only rank 0's own node differs per candidate (O(nodes) per candidate, not a sort and
    // a resource count per node).
    std::vector<std::int64_t> base(caps.size());
    std::vector<std::size_t> order;
    for (std::size_t j = 0; j < caps.size(); ++j) {
      base[j] = worker_.copies_in(caps[j], rest_);
      if (base[j] > 0) order.push_back(j);
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return base[x] > base[y]; });
    // Candidates for rank 0 are interchangeable when they hold as many worker bundles with and
    // without rank 0's: the other nodes then offer the same capacities in the same order, so the
    // fill scores the same and, ties going to the node listed first, only the first of each such
    // class can win (or place the most ranks, for the explanation). Trying one per class makes a
    // solve O(classes × nodes), not O(nodes²); on a cluster of alike nodes there are a few classes.
    std::set<std::pair<std::int64_t, std::int64_t>> tried;
    for (std::size_t c = 0; c < caps.size(); ++c) {
      if (!lead_.fits_in(caps[c])) continue;
      const std::int64_t with_lead = worker_.copies_in(caps[c] - lead_, rest_);
      if (!tried.emplace(base[c], with_lead).second) continue;
      std::vector<std::int64_t> k = base;
      k[c] = with_lead;
      assignment a{c, std::vector<std::int64_t>(caps.size(), 0)};
      score_t score;
      const std::int64_t placed = fill(a, k, order, score);
      if (placed == rest_) {
        if (!best || score > best_score) {
          best = a;
          best_score = score;
        }
      } else if (placed > best_placed) {
        best_placed = placed;
        best_partial = std::make_pair(a, k);
      }
    }
    if (best) return best;
    why_ = explain(caps, best_partial ? &best_partial->first : nullptr,
                   best_partial ? &best_partial->second : nullptr);
    return std::nullopt;
  }

  const std::string& why() const { return why_; }

 private:
  // Assigns ranks 1..N-1 around rank 0's node a.lead given each node's capacity k in worker
  // bundles; returns how many were placed and sets score (higher is better for the strategy).
  // `order`: the nodes with room, most capacity first, then list order (k of every node but
  // a.lead, which it may hold or not).
  std::int64_t fill(assignment& a, const std::vector<std::int64_t>& k,
                    const std::vector<std::size_t>& order, score_t& score) const {
    const std::size_t c = a.lead;
    std::vector<std::size_t> others;  // nodes other than c, most capacity first, then list order
    others.reserve(order.size());
    for (std::size_t j : order) {
      if (j != c) others.push_back(j);
    }
    std::int64_t left = rest_;
    switch (strategy_) {
      case placement_strategy::strict_pack:
        a.extra[c] = std::min(k[c], left);
        left -= a.extra[c];
        break;
      case placement_strategy::strict_spread:
        std::sort(others.begin(), others.end());
        for (std::size_t i = 0; i < others.size() && left > 0; ++i, --left) a.extra[others[i]] = 1;
        break;
      case placement_strategy::pack: {
        a.extra[c] = std::min(k[c], left);
        left -= a.extra[c];
        std::int64_t used = 1;
        for (std::size_t j : others) {
          if (left == 0) break;
          a.extra[j] = std::min(k[j], left);
          left -= a.extra[j];
          ++used;
        }
        // Fewest nodes; then most ranks next to rank 0.
        score = {-used, a.extra[c]};
        break;
      }
      case placement_strategy::spread: {
        std::int64_t used = 1;
        for (std::size_t j : others) {
          if (left == 0) break;
          a.extra[j] = 1;
          --left;
          ++used;
        }
        score = {used, 0};
        // The remainder goes to the least loaded node with room (rank 0 counts on its node).
        using load = std::pair<std::int64_t, std::size_t>;
        std::priority_queue<load, std::vector<load>, std::greater<load>> by_load;
        for (std::size_t j = 0; j < k.size(); ++j) {
          if ((j == c || a.extra[j] > 0) && a.extra[j] < k[j]) {
            by_load.push({a.extra[j] + (j == c ? 1 : 0), j});
          }
        }
        while (left > 0 && !by_load.empty()) {
          const auto [count, j] = by_load.top();
          by_load.pop();
          ++a.extra[j];
          --left;
          if (a.extra[j] < k[j]) by_load.push({count + 1, j});
        }
        break;
      }
    }
    return rest_ - left;
  }

  std::string lead_text() const {
    std::string text = "rank 0's bundle " + lead_.to_string();
    if (!trainer_.empty()) {
      text += " (worker " + worker_.to_string() + " + trainer " + trainer_.to_string() + ")";
    }
    return text;
  }

  std::string on_closest(const std::optional<closest_node>& n) const {
    if (!n) return "";
    return ": closest node " + names_[n->index] + " is missing " + describe(n->missing);
  }

  std::string explain(const std::vector<resource_set>& caps, const assignment* partial,
                      const std::vector<std::int64_t>* k) const {
    const std::int64_t workers = rest_ + 1;
    const std::vector<bool> none(caps.size(), false);
    if (!partial) {
      return lead_text() + " fits on no node" + on_closest(find_closest(lead_, caps, none));
    }
    const std::size_t c = partial->lead;
    if (strategy_ == placement_strategy::strict_pack) {
      const resource_set all = lead_ + worker_.scaled(static_cast<double>(rest_));
      return "STRICT_PACK needs all " + std::to_string(workers) + " ranks on one node, " +
             all.to_string() + " in all" + on_closest(find_closest(all, caps, none));
    }
    const std::int64_t placed = std::accumulate(partial->extra.begin(), partial->extra.end(),
                                                std::int64_t{0});
    const std::string rank = "rank " + std::to_string(placed + 1) + "'s bundle " + worker_.to_string();
    if (strategy_ == placement_strategy::strict_spread) {
      if (static_cast<std::int64_t>(caps.size()) < workers) {
        return "STRICT_SPREAD needs " + std::to_string(workers) +
               " distinct nodes, one per rank, but only " + std::to_string(caps.size()) +
               " alive nodes exist";
      }
      std::vector<bool> skip(caps.size(), false);
      for (std::size_t j = 0; j < caps.size(); ++j) skip[j] = j == c || (*k)[j] > 0;
      return "STRICT_SPREAD puts every rank on its own node; with rank 0 on " + names_[c] +
             " only " + std::to_string(placed) + " other nodes can hold a worker, so " + rank +
             " has no node" + on_closest(find_closest(worker_, caps, skip));
    }
    std::vector<resource_set> left = caps;
    left[c] -= lead_;
    for (std::size_t j = 0; j < caps.size(); ++j) {
      left[j] -= worker_.scaled(static_cast<double>((*k)[j]));
    }
    return rank + " fits on no node once ranks 0.." + std::to_string(placed) +
           " are placed (rank 0 on " + names_[c] + ")" + on_closest(find_closest(worker_, left, none));
  }

  const std::vector<std::string>& names_;
  resource_set worker_;
  resource_set trainer_;
  resource_set lead_;
  std::int64_t rest_;
  placement_strategy strategy_;
  std::string why_;
};

placement to_placement(const assignment& a, const std::vector<std::string>& names,
                       std::vector<resource_set> bundles) {
  placement plan;
  plan.trainer_node = names[a.lead];
  plan.rank_nodes.push_back(names[a.lead]);
  const auto add = [&](std::size_t j) {
    for (std::int64_t i = 0; i < a.extra[j]; ++i) plan.rank_nodes.push_back(names[j]);
  };
  add(a.lead);
  for (std::size_t j = 0; j < names.size(); ++j) {
    if (j != a.lead) add(j);
  }
  plan.rank_bundles = std::move(bundles);
  return plan;
}

// Each node's share of a placement, by node name.
std::map<std::string, resource_set> per_node(const placement& plan) {
  if (plan.rank_nodes.size() != plan.rank_bundles.size()) {
    throw resource_error("placement has " + std::to_string(plan.rank_nodes.size()) +
                         " rank nodes but " + std::to_string(plan.rank_bundles.size()) + " bundles");
  }
  std::map<std::string, resource_set> out;
  for (std::size_t i = 0; i < plan.rank_nodes.size(); ++i) out[plan.rank_nodes[i]] += plan.rank_bundles[i];
  return out;
}

node_inventory* find_node(std::vector<node_inventory>& nodes, const std::string& name) {
  for (auto& n : nodes) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

}  // namespace

const char* to_string(placement_status s) {
  switch (s) {
    case placement_status::placed: return "placed";
    case placement_status::pending: return "pending";
    case placement_status::infeasible: return "infeasible";
  }
  return "?";
}

std::vector<resource_set> job_bundles(const config::scaling_spec& scaling) {
  const resource_set worker(scaling.resources_per_worker);
  std::vector<resource_set> bundles(static_cast<std::size_t>(std::max(scaling.num_workers, 1)), worker);
  bundles[0] += resource_set(scaling.trainer_resources);
  return bundles;
}

placement_result plan_placement(const config::scaling_spec& scaling,
                                const std::vector<node_inventory>& nodes) {
  if (scaling.num_workers < 1) {
    throw resource_error("cannot place a job with num_workers " +
                         std::to_string(scaling.num_workers) + "; it needs at least 1 worker");
  }
  std::vector<std::string> names;
  std::vector<resource_set> free_now;
  std::vector<resource_set> totals;
  const auto& affinity = scaling.nodes;
  for (const auto& n : nodes) {
    if (!n.alive()) continue;
    if (!affinity.empty() && std::find(affinity.begin(), affinity.end(), n.name()) == affinity.end()) continue;
    names.push_back(n.name());
    free_now.push_back(n.available());
    totals.push_back(n.total());
  }
  placement_result result;
  if (names.empty()) {
    result.status = placement_status::infeasible;
    if (affinity.empty()) {
      result.reason = "the cluster has no alive nodes";
    } else {
      std::string listed;
      for (const auto& name : affinity) listed += (listed.empty() ? "" : ", ") + name;
      result.reason = "none of the nodes scaling.nodes names (" + listed + ") is alive in the cluster";
    }
    return result;
  }
  solver now(names, scaling);
  if (const auto a = now.solve(free_now)) {
    result.status = placement_status::placed;
    result.plan = to_placement(*a, names, job_bundles(scaling));
    return result;
  }
  solver ever(names, scaling);
  if (ever.solve(totals)) {
    result.status = placement_status::pending;
    result.reason = "with the resources free now, " + now.why() +
                    "; the alive nodes' total resources can hold the job, so it waits until "
                    "running jobs free them";
  } else {
    result.status = placement_status::infeasible;
    result.reason = ever.why();
  }
  return result;
}

void reserve(const placement& plan, std::vector<node_inventory>& nodes) {
  const auto shares = per_node(plan);
  for (const auto& [name, need] : shares) {
    const node_inventory* node = find_node(nodes, name);
    if (!node) throw resource_error("cannot reserve on node " + name + ": no such node");
    if (!node->can_reserve(need)) {
      node_inventory copy = *node;
      copy.reserve(need);  // throws the detailed error
    }
  }
  for (const auto& [name, need] : shares) find_node(nodes, name)->reserve(need);
}

void release(const placement& plan, std::vector<node_inventory>& nodes) {
  const auto shares = per_node(plan);
  for (const auto& [name, freed] : shares) {
    if (const node_inventory* node = find_node(nodes, name)) {
      node_inventory copy = *node;
      copy.release(freed);  // throws, before anything changed, if it over-frees
    }
  }
  for (const auto& [name, freed] : shares) {
    if (node_inventory* node = find_node(nodes, name)) node->release(freed);
  }
}

std::string plan_json_text(const placement& plan) {
  return nlohmann::json{{"trainer", plan.trainer_node}, {"ranks", plan.rank_nodes}}.dump();
}

}  // namespace cohort::core::resources

// Placement against brute force: on many small random clusters, plan_placement agrees with an
// enumeration of every rank-to-node assignment on placed / pending / infeasible, returns a plan
// that fits and obeys its strategy, and reaches the optimum node count for PACK and SPREAD.
#include <random>
#include <set>

#include <catch2/catch.hpp>

#include "core/resources/placement.hpp"

using namespace cohort::core::resources;
using cohort::config::placement_strategy;
using cohort::config::scaling_spec;

namespace {

struct best_assignment {
  bool feasible = false;
  std::size_t nodes_used = 0;  // PACK: fewest; SPREAD: most; strict: any
};

// Enumerates every assignment of ranks to nodes (m^n of them).
best_assignment brute_force(const std::vector<resource_set>& caps, const std::vector<resource_set>& bundles,
                            placement_strategy strategy) {
  best_assignment best;
  const std::size_t m = caps.size();
  const std::size_t n = bundles.size();
  if (m == 0) return best;
  std::vector<std::size_t> at(n, 0);
  while (true) {
    std::vector<resource_set> load(m);
    for (std::size_t i = 0; i < n; ++i) load[at[i]] += bundles[i];
    bool ok = true;
    for (std::size_t j = 0; j < m && ok; ++j) ok = load[j].fits_in(caps[j]);
    const std::size_t used = std::set<std::size_t>(at.begin(), at.end()).size();
    if (strategy == placement_strategy::strict_pack) ok = ok && used == 1;
    if (strategy == placement_strategy::strict_spread) ok = ok && used == n;
    if (ok) {
      const bool better = !best.feasible ||
                          (strategy == placement_strategy::pack && used < best.nodes_used) ||
                          (strategy == placement_strategy::spread && used > best.nodes_used);
      if (better) best = {true, used};
    }
    std::size_t i = 0;
    while (i < n && ++at[i] == m) at[i++] = 0;
    if (i == n) break;
  }
  return best;
}

template <class T>
T pick(std::mt19937& rng, const std::vector<T>& options) {
  return options[std::uniform_int_distribution<std::size_t>(0, options.size() - 1)(rng)];
}

}  // namespace

TEST_CASE("placement agrees with brute force on small random clusters", "[core]") {
  std::mt19937 rng(20261126);
  const std::vector<placement_strategy> strategies = {
      placement_strategy::pack, placement_strategy::spread, placement_strategy::strict_pack,
      placement_strategy::strict_spread};
  int counts[3] = {0, 0, 0};
  for (int trial = 0; trial < 1500; ++trial) {
    const std::size_t m = pick<std::size_t>(rng, {1, 2, 3, 4});
    std::vector<node_inventory> nodes;
    for (std::size_t j = 0; j < m; ++j) {
      cohort::config::resource_quantities q = {{"CPU", pick<double>(rng, {0, 1, 2, 3, 4, 6})},
                                               {"GPU", pick<double>(rng, {0, 0.5, 1, 2, 3})}};
      if (pick<int>(rng, {0, 0, 1})) q["large_cpu_mem"] = 1;
      nodes.emplace_back("n" + std::to_string(j), resource_set(q));
      // Some of each node is already taken by other jobs; some nodes are dead.
      const double taken = pick<double>(rng, {0, 0, 0.5, 1});
      if (taken > 0) nodes.back().reserve(nodes.back().total().scaled(taken));
      if (pick<int>(rng, {0, 0, 0, 0, 1})) nodes.back().set_alive(false);
    }
    scaling_spec s;
    s.num_workers = pick<int>(rng, {1, 2, 3, 4, 5});
    s.resources_per_worker = {{"CPU", pick<double>(rng, {0, 1, 2})}, {"GPU", pick<double>(rng, {0, 0.5, 1})}};
    s.trainer_resources = pick<cohort::config::resource_quantities>(
        rng, {{}, {{"large_cpu_mem", 0.01}}, {{"CPU", 1}}});
    s.strategy = pick(rng, strategies);

    std::vector<resource_set> free_now;
    std::vector<resource_set> totals;
    for (const auto& n : nodes) {
      if (!n.alive()) continue;
      free_now.push_back(n.available());
      totals.push_back(n.total());
    }
    const auto bundles = job_bundles(s);
    const best_assignment now = brute_force(free_now, bundles, s.strategy);
    const best_assignment ever = brute_force(totals, bundles, s.strategy);
    const placement_result r = plan_placement(s, nodes);
    INFO("trial " << trial << ", strategy " << cohort::config::to_string(s.strategy) << ", "
                  << s.num_workers << " x " << resource_set(s.resources_per_worker).to_string()
                  << " + trainer " << resource_set(s.trainer_resources).to_string());
    INFO("reason: " << r.reason);
    const placement_status expected = now.feasible    ? placement_status::placed
                                      : ever.feasible ? placement_status::pending
                                                      : placement_status::infeasible;
    REQUIRE(r.status == expected);
    ++counts[static_cast<int>(expected)];
    if (r.status != placement_status::placed) {
      CHECK_THAT(r.reason, Catch::Contains("missing") || Catch::Contains("distinct nodes") ||
                               Catch::Contains("no alive nodes"));
      continue;
    }
    const std::size_t used = std::set<std::string>(r.plan.rank_nodes.begin(), r.plan.rank_nodes.end()).size();
    if (s.strategy == placement_strategy::pack || s.strategy == placement_strategy::spread) {
      CHECK(used == now.nodes_used);
    }
    if (s.strategy == placement_strategy::strict_pack) CHECK(used == 1);
    if (s.strategy == placement_strategy::strict_spread) CHECK(used == r.plan.rank_nodes.size());
    std::vector<node_inventory> copy = nodes;
    CHECK_NOTHROW(reserve(r.plan, copy));
  }
  // The random cases cover every outcome.
  CHECK(counts[0] > 100);
  CHECK(counts[1] > 50);
  CHECK(counts[2] > 100);
}

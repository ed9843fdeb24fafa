// Placement tables for every strategy, rank 0 + trainer on the tagged node, pending vs
// infeasible with explanations, fractional bundles, and reserve/release of placements.
#include <catch2/catch.hpp>

#include "core/resources/placement.hpp"

using namespace cohort::core::resources;
using cohort::config::placement_strategy;
using cohort::config::resource_quantities;
using cohort::config::scaling_spec;
using names = std::vector<std::string>;

namespace {

std::vector<node_inventory> cluster(
    const std::vector<std::pair<std::string, resource_quantities>>& nodes) {
  std::vector<node_inventory> out;
  for (const auto& [name, q] : nodes) out.emplace_back(name, resource_set(q));
  return out;
}

scaling_spec job(int workers, resource_quantities per_worker, placement_strategy strategy,
                 resource_quantities trainer = {}) {
  scaling_spec s;
  s.num_workers = workers;
  s.resources_per_worker = std::move(per_worker);
  s.trainer_resources = std::move(trainer);
  s.strategy = strategy;
  return s;
}

names placed(const scaling_spec& s, const std::vector<node_inventory>& nodes) {
  const placement_result r = plan_placement(s, nodes);
  INFO("reason: " << r.reason);
  REQUIRE(r.status == placement_status::placed);
  CHECK(r.reason.empty());
  CHECK(r.plan.trainer_node == r.plan.rank_nodes.at(0));
  CHECK(r.plan.rank_nodes.size() == static_cast<std::size_t>(s.num_workers));
  return r.plan.rank_nodes;
}

const resource_quantities gpu_worker = {{"CPU", 1}, {"GPU", 1}};

names operator+(names a, const names& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("PACK puts the bundles on as few nodes as possible", "[core]") {
  const auto nodes = cluster({{"n1", {{"CPU", 8}, {"GPU", 4}}},
                              {"n2", {{"CPU", 8}, {"GPU", 4}}},
                              {"n3", {{"CPU", 8}, {"GPU", 4}}}});
  CHECK(placed(job(4, gpu_worker, placement_strategy::pack), nodes) == names{"n1", "n1", "n1", "n1"});
  CHECK(placed(job(6, gpu_worker, placement_strategy::pack), nodes) ==
        names{"n1", "n1", "n1", "n1", "n2", "n2"});
}

TEST_CASE("PACK finds the one node that holds everything even when it is listed last", "[core]") {
  // First-fit in list order would use two nodes.
  const auto nodes = cluster({{"small", {{"CPU", 8}, {"GPU", 2}}}, {"big", {{"CPU", 8}, {"GPU", 8}}}});
  CHECK(placed(job(4, gpu_worker, placement_strategy::pack), nodes) ==
        names{"big", "big", "big", "big"});
}

TEST_CASE("SPREAD uses as many distinct nodes as possible and then balances", "[core]") {
  const auto nodes = cluster({{"n1", {{"CPU", 8}, {"GPU", 4}}},
                              {"n2", {{"CPU", 8}, {"GPU", 4}}},
                              {"n3", {{"CPU", 8}, {"GPU", 4}}}});
  CHECK(placed(job(3, gpu_worker, placement_strategy::spread), nodes) == names{"n1", "n2", "n3"});
  CHECK(placed(job(5, gpu_worker, placement_strategy::spread), nodes) ==
        names{"n1", "n1", "n2", "n2", "n3"});
  // A node that cannot hold a worker is skipped; the others still spread.
  const auto mixed = cluster({{"gpu1", {{"CPU", 8}, {"GPU", 2}}},
                              {"cpu", {{"CPU", 64}}},
                              {"gpu2", {{"CPU", 8}, {"GPU", 2}}}});
  CHECK(placed(job(2, gpu_worker, placement_strategy::spread), mixed) == names{"gpu1", "gpu2"});
}

TEST_CASE("Among alike nodes rank 0 goes to the first listed, on a cluster of many", "[core]") {
  // 1,000 nodes of 8 slots, some of them half used: rank 0 is tried once per kind of node, and
  // the plan is the one that trying every node gives (ties to the node listed first).
  std::vector<node_inventory> nodes;
  for (int i = 0; i < 1000; ++i) {
    nodes.emplace_back("n" + std::to_string(i), resource_set({{"CPU", 8}}));
    if (i % 3 == 0) nodes.back().reserve(resource_set({{"CPU", 4}}));
  }
  // PACK, 16 ranks: two whole nodes, the first two free ones (n1, n2).
  auto pack = placed(job(16, {{"CPU", 1}}, placement_strategy::pack), nodes);
  CHECK(pack == names(8, "n1") + names(8, "n2"));
  // PACK, 6 ranks: one free node, the first (n1), though n0 is listed before it.
  CHECK(placed(job(6, {{"CPU", 1}}, placement_strategy::pack), nodes) == names(6, "n1"));
  // PACK, 4 ranks: the half-used n0 holds them all and is listed first.
  CHECK(placed(job(4, {{"CPU", 1}}, placement_strategy::pack), nodes) == names(4, "n0"));
  // SPREAD, 3 ranks: one on each of the first three nodes.
  CHECK(placed(job(3, {{"CPU", 1}}, placement_strategy::spread), nodes) == names{"n0", "n1", "n2"});
  // A trainer that asks more than a half-used node has left puts rank 0 on the first free node.
  CHECK(placed(job(2, {{"CPU", 1}}, placement_strategy::pack, {{"CPU", 5}}), nodes) ==
        names{"n1", "n1"});
}

TEST_CASE("STRICT_PACK puts every bundle on one node or nowhere", "[core]") {
  const auto nodes = cluster({{"n1", {{"CPU", 8}, {"GPU", 2}}},
                              {"n2", {{"CPU", 8}, {"GPU", 2}}},
                              {"n3", {{"CPU", 8}, {"GPU", 4}}}});
  CHECK(placed(job(3, gpu_worker, placement_strategy::strict_pack), nodes) ==
        names{"n3", "n3", "n3"});
  const placement_result r =
      plan_placement(job(5, gpu_worker, placement_strategy::strict_pack), nodes);
  CHECK(r.status == placement_status::infeasible);
  CHECK_THAT(r.reason, Catch::Contains("STRICT_PACK needs all 5 ranks on one node") &&
                           Catch::Contains("closest node n3 is missing GPU 1 (needs 5, has 4)"));
  // PACK takes what STRICT_PACK refuses.
  CHECK(placed(job(5, gpu_worker, placement_strategy::pack), nodes) ==
        names{"n3", "n3", "n3", "n3", "n1"});
}

TEST_CASE("STRICT_SPREAD puts every bundle on its own node or nowhere", "[core]") {
  const auto nodes = cluster({{"n1", {{"CPU", 8}, {"GPU", 4}}},
                              {"n2", {{"CPU", 8}, {"GPU", 4}}},
                              {"n3", {{"CPU", 8}, {"GPU", 4}}}});
  CHECK(placed(job(3, gpu_worker, placement_strategy::strict_spread), nodes) ==
        names{"n1", "n2", "n3"});
  const placement_result r =
      plan_placement(job(4, gpu_worker, placement_strategy::strict_spread), nodes);
  CHECK(r.status == placement_status::infeasible);
  CHECK_THAT(r.reason, Catch::Contains("4 distinct nodes") && Catch::Contains("only 3 alive nodes"));

  const auto one_gpu_node = cluster({{"a", {{"CPU", 8}, {"GPU", 1}}},
                                     {"b", {{"CPU", 8}}},
                                     {"c", {{"CPU", 8}, {"GPU", 1}}}});
  CHECK(placed(job(2, gpu_worker, placement_strategy::strict_spread), one_gpu_node) == names{"a", "c"});
  const placement_result short_of_gpus =
      plan_placement(job(3, gpu_worker, placement_strategy::strict_spread), one_gpu_node);
  CHECK(short_of_gpus.status == placement_status::infeasible);
  CHECK_THAT(short_of_gpus.reason, Catch::Contains("rank 2's bundle {CPU: 1, GPU: 1} has no node") &&
                                       Catch::Contains("closest node b is missing GPU 1"));
}

TEST_CASE("trainer resources put rank 0 and the trainer on the large_cpu_mem node", "[core]") {
  const auto nodes = cluster({{"plain", {{"CPU", 8}, {"GPU", 4}}},
                              {"big-ram", {{"CPU", 8}, {"GPU", 4}, {"large_cpu_mem", 1}}},
                              {"plain2", {{"CPU", 8}, {"GPU", 4}}}});
  const resource_quantities tag = {{"large_cpu_mem", 0.01}};
  struct row {
    int workers;
    placement_strategy strategy;
    names expected;
  };
  const row table[] = {
      {1, placement_strategy::pack, {"big-ram"}},
      {4, placement_strategy::pack, {"big-ram", "big-ram", "big-ram", "big-ram"}},
      {6, placement_strategy::pack, {"big-ram", "big-ram", "big-ram", "big-ram", "plain", "plain"}},
      {3, placement_strategy::spread, {"big-ram", "plain", "plain2"}},
      {2, placement_strategy::strict_pack, {"big-ram", "big-ram"}},
      {3, placement_strategy::strict_spread, {"big-ram", "plain", "plain2"}},
  };
  for (const auto& r : table) {
    INFO("strategy " << cohort::config::to_string(r.strategy) << ", " << r.workers << " workers");
    const scaling_spec s = job(r.workers, gpu_worker, r.strategy, tag);
    CHECK(placed(s, nodes) == r.expected);
    CHECK(plan_placement(s, nodes).plan.trainer_node == "big-ram");
    CHECK(plan_placement(s, nodes).plan.rank_bundles[0] ==
          resource_set({{"CPU", 1}, {"GPU", 1}, {"large_cpu_mem", 0.01}}));
  }
  // The tag is fractional: several jobs' trainers can share the one high-RAM node.
  CHECK(resource_set(tag).copies_in(nodes[1].total(), 1000) == 100);
}

TEST_CASE("a trainer tag that no node has makes the job infeasible, naming the tag", "[core]") {
  const auto nodes = cluster({{"n1", {{"CPU", 8}, {"GPU", 4}}}, {"n2", {{"CPU", 8}}}});
  const placement_result r = plan_placement(
      job(2, gpu_worker, placement_strategy::pack, {{"large_cpu_mem", 0.01}}), nodes);
  CHECK(r.status == placement_status::infeasible);
  CHECK_THAT(r.reason, Catch::Contains("rank 0's bundle") &&
                           Catch::Contains("trainer {large_cpu_mem: 0.01}") &&
                           Catch::Contains("closest node n1 is missing large_cpu_mem 0.01 (needs 0.01, has 0)"));
}

TEST_CASE("fractional GPU bundles share GPUs", "[core]") {
  const auto nodes = cluster({{"n1", {{"CPU", 8}, {"GPU", 1}}}, {"n2", {{"CPU", 8}, {"GPU", 1}}}});
  const resource_quantities half = {{"CPU", 1}, {"GPU", 0.5}};
  CHECK(placed(job(4, half, placement_strategy::pack), nodes) == names{"n1", "n1", "n2", "n2"});
  CHECK(placed(job(2, half, placement_strategy::strict_pack), nodes) == names{"n1", "n1"});
  CHECK(placed(job(4, half, placement_strategy::spread), nodes) == names{"n1", "n1", "n2", "n2"});
  const placement_result r = plan_placement(job(5, half, placement_strategy::pack), nodes);
  CHECK(r.status == placement_status::infeasible);
  CHECK_THAT(r.reason, Catch::Contains("rank 4's bundle {CPU: 1, GPU: 0.5} fits on no node") &&
                           Catch::Contains("is missing GPU 0.5 (needs 0.5, has 0)"));
}

TEST_CASE("capacity spread thinly over nodes explains the first rank that does not fit", "[core]") {
  // 6 GPUs in all but each node holds one 2-GPU bundle only.
  const auto nodes = cluster({{"n1", {{"CPU", 8}, {"GPU", 3}}}, {"n2", {{"CPU", 8}, {"GPU", 3}}}});
  const placement_result r =
      plan_placement(job(3, {{"CPU", 1}, {"GPU", 2}}, placement_strategy::pack), nodes);
  CHECK(r.status == placement_status::infeasible);
  CHECK_THAT(r.reason, Catch::Contains("rank 2's bundle {CPU: 1, GPU: 2} fits on no node once ranks 0..1") &&
                           Catch::Contains("closest node n1 is missing GPU 1 (needs 2, has 1)"));
}

TEST_CASE("a job that fits the cluster but not its free resources is pending", "[core]") {
  auto nodes = cluster({{"n1", {{"CPU", 8}, {"GPU", 2}}}, {"n2", {{"CPU", 8}, {"GPU", 2}}}});
  const scaling_spec first = job(3, gpu_worker, placement_strategy::pack);
  const placement_result a = plan_placement(first, nodes);
  REQUIRE(a.status == placement_status::placed);
  reserve(a.plan, nodes);
  CHECK(nodes[0].available() == resource_set({{"CPU", 6}}));
  CHECK(nodes[1].available() == resource_set({{"CPU", 7}, {"GPU", 1}}));

  const scaling_spec second = job(2, gpu_worker, placement_strategy::pack);
  const placement_result b = plan_placement(second, nodes);
  CHECK(b.status == placement_status::pending);
  CHECK_THAT(b.reason, Catch::Contains("rank 1's bundle {CPU: 1, GPU: 1}") &&
                           Catch::Contains("missing GPU 1 (needs 1, has 0)") &&
                           Catch::Contains("waits"));
  // A job larger than the whole cluster is infeasible, not pending.
  CHECK(plan_placement(job(5, gpu_worker, placement_strategy::pack), nodes).status ==
        placement_status::infeasible);

  release(a.plan, nodes);
  CHECK(nodes[0].available() == nodes[0].total());
  CHECK(plan_placement(second, nodes).status == placement_status::placed);
}

TEST_CASE("dead nodes are not used and a cluster without live nodes places nothing", "[core]") {
  auto nodes = cluster({{"n1", {{"CPU", 8}, {"GPU", 4}}}, {"n2", {{"CPU", 8}, {"GPU", 4}}}});
  nodes[0].set_alive(false);
  CHECK(placed(job(2, gpu_worker, placement_strategy::pack), nodes) == names{"n2", "n2"});
  CHECK(plan_placement(job(2, gpu_worker, placement_strategy::strict_spread), nodes).status ==
        placement_status::infeasible);
  nodes[1].set_alive(false);
  const placement_result r = plan_placement(job(1, gpu_worker, placement_strategy::pack), nodes);
  CHECK(r.status == placement_status::infeasible);
  CHECK_THAT(r.reason, Catch::Contains("no alive nodes"));
}

TEST_CASE("scaling.nodes keeps the job on the nodes it names, and names them when none is alive",
          "[core]") {
  auto nodes = cluster({{"n1", {{"CPU", 4}}}, {"n2", {{"CPU", 4}}}, {"n3", {{"CPU", 4}}}});
  auto s = job(4, {{"CPU", 1}}, placement_strategy::spread);
  s.nodes = {"n3", "n2"};
  // SPREAD over the named nodes only, in the cluster's order; n1 takes nothing.
  CHECK(placed(s, nodes) == names{"n2", "n2", "n3", "n3"});
  s.num_workers = 9;  // more than the two named nodes hold, though the cluster would
  CHECK(plan_placement(s, nodes).status == placement_status::infeasible);
  s.num_workers = 1;
  s.nodes = {"n9"};
  const placement_result r = plan_placement(s, nodes);
  CHECK(r.status == placement_status::infeasible);
  CHECK_THAT(r.reason, Catch::Contains("none of the nodes scaling.nodes names (n9) is alive"));
}

TEST_CASE("reserve is all or nothing and release skips nodes that left", "[core]") {
  auto nodes = cluster({{"n1", {{"CPU", 4}}}, {"n2", {{"CPU", 4}}}});
  placement plan;
  plan.trainer_node = "n1";
  plan.rank_nodes = {"n1", "n2", "n2"};
  plan.rank_bundles = {resource_set({{"CPU", 2}}), resource_set({{"CPU", 2}}), resource_set({{"CPU", 3}})};
  CHECK_THROWS_WITH(reserve(plan, nodes), Catch::Contains("n2") && Catch::Contains("CPU 1 (needs 5, has 4)"));
  CHECK(nodes[0].available() == nodes[0].total());
  CHECK(nodes[1].available() == nodes[1].total());

  plan.rank_bundles[2] = resource_set({{"CPU", 2}});
  reserve(plan, nodes);
  CHECK(nodes[0].available() == resource_set({{"CPU", 2}}));
  CHECK(nodes[1].available().empty());
  CHECK_THROWS_WITH(reserve(plan, nodes), Catch::Contains("cannot reserve"));

  plan.rank_nodes[0] = "gone";
  CHECK_THROWS_WITH(reserve(plan, nodes), Catch::Contains("no such node"));
  release(plan, nodes);  // frees n2; "gone" is skipped
  CHECK(nodes[1].available() == nodes[1].total());
  CHECK(nodes[0].available() == resource_set({{"CPU", 2}}));
  CHECK_THROWS(release(plan, nodes));  // n2 was already freed
  CHECK(nodes[1].available() == nodes[1].total());
}

TEST_CASE("the plan renders as the submit plan JSON object", "[core]") {
  const auto nodes = cluster({{"n1", {{"CPU", 2}}}, {"n2", {{"CPU", 2}, {"large_cpu_mem", 1}}}});
  const placement_result r = plan_placement(
      job(3, {{"CPU", 1}}, placement_strategy::pack, {{"large_cpu_mem", 0.01}}), nodes);
  REQUIRE(r.status == placement_status::placed);
  CHECK(plan_json_text(r.plan) == R"({"ranks":["n2","n2","n1"],"trainer":"n2"})");
  CHECK(std::string(to_string(placement_status::pending)) == "pending");
}

TEST_CASE("job_bundles merges the trainer into rank 0's bundle", "[core]") {
  const auto bundles = job_bundles(job(3, {{"CPU", 2}}, placement_strategy::pack, {{"CPU", 1}, {"memory", 1e9}}));
  REQUIRE(bundles.size() == 3);
  CHECK(bundles[0] == resource_set({{"CPU", 3}, {"memory", 1e9}}));
  CHECK(bundles[1] == resource_set({{"CPU", 2}}));
  CHECK(bundles[2] == resource_set({{"CPU", 2}}));
}

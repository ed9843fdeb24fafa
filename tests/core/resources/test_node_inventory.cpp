// node_inventory: reserve/release accounting that never goes negative or above the total.
#include <catch2/catch.hpp>

#include "core/resources/node_inventory.hpp"

using namespace cohort::core::resources;

TEST_CASE("a node reserves and releases fractional resources", "[core]") {
  node_inventory node("n1", resource_set({{"CPU", 8}, {"GPU", 1}}));
  CHECK(node.available() == node.total());
  node.reserve(resource_set({{"CPU", 2}, {"GPU", 0.5}}));
  node.reserve(resource_set({{"CPU", 2}, {"GPU", 0.5}}));
  CHECK(node.available() == resource_set({{"CPU", 4}}));
  CHECK_FALSE(node.can_reserve(resource_set({{"GPU", 0.5}})));
  node.release(resource_set({{"CPU", 2}, {"GPU", 0.5}}));
  CHECK(node.available() == resource_set({{"CPU", 6}, {"GPU", 0.5}}));
}

TEST_CASE("over-reserving fails naming the node and the missing resource", "[core]") {
  node_inventory node("n1", resource_set({{"CPU", 8}}));
  CHECK_THROWS_WITH(node.reserve(resource_set({{"CPU", 4}, {"GPU", 1}})),
                    Catch::Contains("n1") && Catch::Contains("GPU 1 (needs 1, has 0)"));
  CHECK(node.available() == node.total());
}

TEST_CASE("releasing what was never reserved fails and changes nothing", "[core]") {
  node_inventory node("n1", resource_set({{"CPU", 8}}));
  node.reserve(resource_set({{"CPU", 1}}));
  CHECK_THROWS_WITH(node.release(resource_set({{"CPU", 2}})), Catch::Contains("n1"));
  CHECK(node.available() == resource_set({{"CPU", 7}}));
}

TEST_CASE("a dead node refuses reservations", "[core]") {
  node_inventory node("n1", resource_set({{"CPU", 8}}));
  node.set_alive(false);
  CHECK_FALSE(node.can_reserve(resource_set({{"CPU", 1}})));
  CHECK_THROWS_WITH(node.reserve(resource_set({{"CPU", 1}})), Catch::Contains("dead"));
}

TEST_CASE("inventories come from NODES.json specs with everything free", "[core]") {
  const auto nodes = inventories_from_specs(
      {{"a", {{"CPU", 8}, {"large_cpu_mem", 1}}}, {"b", {{"CPU", 4}, {"GPU", 0.5}}}});
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0].name() == "a");
  CHECK(nodes[0].available() == resource_set({{"CPU", 8}, {"large_cpu_mem", 1}}));
  CHECK(nodes[1].total().get("GPU") == 0.5);
  CHECK(nodes[1].alive());
  CHECK(nodes[0].gpu_memory_bytes() == 0);
}

TEST_CASE("a node inventory carries the memory of one GPU from its spec", "[core]") {
  cohort::config::node_spec spec{"g", {{"GPU", 2}}, 80'000'000'000};
  node_inventory node(spec);
  CHECK(node.gpu_memory_bytes() == 80'000'000'000);
  node.set_gpu_memory_bytes(24'000'000'000);
  CHECK(node.gpu_memory_bytes() == 24'000'000'000);
}

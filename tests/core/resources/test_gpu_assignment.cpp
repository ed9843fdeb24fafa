// GPU isolation by index: whole GPUs are never shared, fractions pack onto shared GPUs, released
// GPUs are reused, and a placement's ranks get their indices all or nothing.
#include <catch2/catch.hpp>

#include "core/resources/gpu_assignment.hpp"

using namespace cohort::core::resources;
using indices = std::vector<std::int32_t>;

TEST_CASE("whole GPUs go to one bundle each, lowest free index first", "[core]") {
  gpu_pool pool(4);
  CHECK(pool.take(1) == indices{0});
  CHECK(pool.take(2) == indices{1, 2});
  CHECK(pool.take(2) == std::nullopt);
  CHECK(pool.take(1) == indices{3});
  CHECK(pool.take(0) == indices{});
  pool.give_back({1, 2}, 2);
  CHECK(pool.take(1) == indices{1});
}

TEST_CASE("fractional bundles share one GPU before they start another", "[core]") {
  gpu_pool pool(2);
  CHECK(pool.take(0.5) == indices{0});
  CHECK(pool.take(0.25) == indices{0});
  CHECK(pool.take(1) == indices{1});  // GPU 0 is partly used: not free for a whole GPU
  CHECK(pool.take(0.5) == std::nullopt);
  CHECK(pool.take(0.25) == indices{0});
  pool.give_back({0}, 0.5);
  CHECK(pool.used(0) == Approx(0.5));
}

TEST_CASE("fractions that fit by count but are spread over GPUs are refused", "[core]") {
  gpu_pool pool(2);
  CHECK(pool.take(0.6) == indices{0});
  CHECK(pool.take(0.6) == indices{1});
  CHECK(pool.take(0.6) == std::nullopt);
  CHECK_THROWS_AS(pool.take(1.5), resource_error);
}

TEST_CASE("taking known indices again refuses ones in use or out of range", "[core]") {
  gpu_pool pool(2);
  pool.take_exact({1}, 1);
  CHECK(pool.used(1) == Approx(1));
  CHECK_THROWS_WITH(pool.take_exact({1}, 1), Catch::Contains("GPU 1 is already in use"));
  CHECK_THROWS_WITH(pool.take_exact({0, 2}, 1), Catch::Contains("GPU index 2 is not one of"));
  CHECK(pool.used(0) == Approx(0));  // nothing changed
}

TEST_CASE("a placement's ranks get GPUs on their own nodes, all or nothing", "[core]") {
  std::map<std::string, gpu_pool> pools{{"a", gpu_pool(2)}, {"b", gpu_pool(1)}};
  const resource_set one_gpu({{"CPU", 1}, {"GPU", 1}});
  placement plan{"a", {"a", "a", "b"}, {one_gpu, one_gpu, one_gpu}};
  std::string why;
  auto gpus = assign_gpus(plan, pools, why);
  REQUIRE(gpus);
  CHECK(*gpus == rank_gpu_indices{{0}, {1}, {0}});
  auto again = assign_gpus(plan, pools, why);
  CHECK_FALSE(again);
  CHECK_THAT(why, Catch::Contains("rank 0's 1 GPU on node a"));
  std::map<std::string, gpu_pool> fresh{{"a", gpu_pool(2)}, {"b", gpu_pool(1)}};
  placement too_many{"a", {"a", "b", "b"}, {one_gpu, one_gpu, one_gpu}};
  CHECK_FALSE(assign_gpus(too_many, fresh, why));
  CHECK(fresh["a"].used(0) == Approx(0));  // the failed try took nothing
  CHECK(fresh["b"].used(0) == Approx(0));
  release_gpus(plan, *gpus, pools);
  CHECK(pools["a"].used(0) == Approx(0));
  CHECK(pools["b"].used(0) == Approx(0));
  gpu_pool a(2);
  take_gpus_on("a", plan, *gpus, a);
  CHECK(a.used(0) == Approx(1));
  CHECK(a.used(1) == Approx(1));
}

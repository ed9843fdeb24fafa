// Tests of the deterministic distributed sampler.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "core/data/format.hpp"
#include "core/data/permutation.hpp"
#include "core/data/sampler.hpp"

using namespace cohort::core::data;

TEST_CASE("the Feistel permutation is a bijection of [0, n) for any n", "[core][data]") {
  for (std::uint64_t n : {1u, 2u, 3u, 5u, 16u, 17u, 1000u, 4097u, 65537u}) {
    feistel_permutation p(n, 42);
    std::vector<char> seen(n, 0);
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto v = p(i);
      REQUIRE(v < n);
      REQUIRE(seen[v] == 0);
      seen[v] = 1;
    }
  }
}

TEST_CASE("different keys give different permutations, the same key the same one", "[core][data]") {
  feistel_permutation a(10000, 1), b(10000, 2), a2(10000, 1);
  int differ = 0, fixed_points = 0;
  for (std::uint64_t i = 0; i < 10000; ++i) {
    differ += a(i) != b(i);
    fixed_points += a(i) == i;
    REQUIRE(a(i) == a2(i));
  }
  CHECK(differ > 9900);
  CHECK(fixed_points < 20);  // a shuffle, not the identity
}

TEST_CASE("steps per epoch come from the whole dataset and drop the last partial batch", "[core][data]") {
  sampler s(22116015, 8 * 2 * 4, 0);
  CHECK(s.steps_per_epoch() == 22116015 / 64);
  CHECK(s.dropped_per_epoch() == 22116015 % 64);
  CHECK_THROWS_AS(sampler(10, 11, 0), data_error);
  CHECK_THROWS_AS(sampler(10, 0, 0), data_error);
}

TEST_CASE("for W in 1, 2, 4, 8 with one global batch, each step's union is identical and parts disjoint",
          "[core][data]") {
  const std::int64_t n = 1000, global = 32, seed = 1234;
  sampler s(n, global, seed);
  const std::vector<batch_geometry> geometries{{1, 4, 8}, {2, 4, 4}, {4, 2, 4}, {8, 4, 1}};
  for (std::int64_t step : {0, 1, 30, 31, 32, 100}) {
    auto expected = s.step_samples(step);
    std::sort(expected.begin(), expected.end());
    for (const auto& g : geometries) {
      REQUIRE(g.global_batch() == global);
      std::vector<std::int64_t> all;
      for (std::int64_t r = 0; r < g.world_size; ++r) {
        const auto part = s.rank_samples(step, g, r);
        REQUIRE(static_cast<std::int64_t>(part.size()) == g.micro_batch * g.grad_accum);
        std::vector<std::int64_t> from_micro;
        for (std::int64_t m = 0; m < g.grad_accum; ++m) {
          const auto mb = s.micro_batch_samples(step, g, r, m);
          from_micro.insert(from_micro.end(), mb.begin(), mb.end());
        }
        CHECK(from_micro == part);  // micro-batches split the rank's part in order
        all.insert(all.end(), part.begin(), part.end());
      }
      std::sort(all.begin(), all.end());
      CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());  // disjoint
      CHECK(all == expected);
    }
  }
}

TEST_CASE("every sample appears exactly once per epoch except the dropped remainder", "[core][data]") {
  const std::int64_t n = 1003, global = 10;
  sampler s(n, global, 7);
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int> count(n, 0);
    for (std::int64_t k = 0; k < s.steps_per_epoch(); ++k)
      for (auto id : s.step_samples(epoch * s.steps_per_epoch() + k)) ++count[static_cast<std::size_t>(id)];
    CHECK(std::count(count.begin(), count.end(), 1) == n - 3);
    CHECK(std::count(count.begin(), count.end(), 0) == 3);
  }
  // Epochs are shuffled differently.
  CHECK(s.step_samples(0) != s.step_samples(s.steps_per_epoch()));
}

TEST_CASE("the samples of a step depend on the seed", "[core][data]") {
  sampler a(5000, 16, 1), b(5000, 16, 2);
  CHECK(a.step_samples(3) != b.step_samples(3));
  CHECK(a.step_samples(3) == sampler(5000, 16, 1).step_samples(3));
}

TEST_CASE("a sampler refuses a geometry whose global batch differs or a rank outside the world", "[core][data]") {
  sampler s(100, 8, 0);
  CHECK_THROWS_AS(s.rank_samples(0, {2, 2, 1}, 0), data_error);
  CHECK_THROWS_AS(s.rank_samples(0, {2, 2, 2}, 2), data_error);
  CHECK_THROWS_AS(s.rank_samples(-1, {2, 2, 2}, 0), data_error);
  CHECK_THROWS_AS(s.micro_batch_samples(0, {2, 2, 2}, 0, 2), data_error);
}

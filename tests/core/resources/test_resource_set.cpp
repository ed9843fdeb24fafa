// resource_set: fractional quantities with tolerant comparisons and explained shortfalls.
#include <catch2/catch.hpp>

#include "core/resources/resource_set.hpp"

using namespace cohort::core::resources;

TEST_CASE("ten tenths of a GPU fit in one GPU and use it up exactly", "[core]") {
  const resource_set one_gpu({{"GPU", 1.0}});
  const resource_set tenth({{"GPU", 0.1}});
  resource_set used;
  for (int i = 0; i < 10; ++i) used += tenth;
  CHECK(used.fits_in(one_gpu));
  CHECK(used == one_gpu);
  resource_set left = one_gpu;
  for (int i = 0; i < 10; ++i) left -= tenth;
  CHECK(left.empty());
  CHECK_FALSE(tenth.fits_in(left));
  CHECK(tenth.copies_in(one_gpu, 100) == 10);
  CHECK(resource_set({{"GPU", 0.1}}) + resource_set({{"GPU", 0.2}}) == resource_set({{"GPU", 0.3}}));
}

TEST_CASE("a resource absent from a set counts as zero", "[core]") {
  const resource_set need({{"CPU", 1}, {"large_cpu_mem", 0.01}});
  const resource_set node({{"CPU", 8}, {"GPU", 1}});
  CHECK(node.get("large_cpu_mem") == 0.0);
  CHECK_FALSE(need.fits_in(node));
  CHECK(resource_set({{"CPU", 1}}).fits_in(node));
  CHECK(resource_set().fits_in(resource_set()));
}

TEST_CASE("zero quantities are dropped and negative ones are refused", "[core]") {
  CHECK(resource_set({{"CPU", 2}, {"GPU", 0}}).quantities() == cohort::config::resource_quantities{{"CPU", 2}});
  CHECK_THROWS_WITH(resource_set({{"GPU", -1}}), Catch::Contains("GPU") && Catch::Contains("-1"));
}

TEST_CASE("taking more than a set holds fails naming the resource", "[core]") {
  resource_set node({{"CPU", 4}, {"GPU", 1}});
  CHECK_THROWS_WITH(node -= resource_set({{"GPU", 2}}), Catch::Contains("GPU 2") && Catch::Contains("only 1"));
  CHECK(node == resource_set({{"CPU", 4}, {"GPU", 1}}));
}

TEST_CASE("copies_in counts whole bundles across every resource", "[core]") {
  const resource_set bundle({{"CPU", 3}, {"GPU", 0.5}});
  CHECK(bundle.copies_in(resource_set({{"CPU", 16}, {"GPU", 2}}), 100) == 4);
  CHECK(bundle.copies_in(resource_set({{"CPU", 8}, {"GPU", 2}}), 100) == 2);
  CHECK(bundle.copies_in(resource_set({{"CPU", 8}}), 100) == 0);
  CHECK(bundle.copies_in(resource_set({{"CPU", 16}, {"GPU", 2}}), 3) == 3);
  CHECK(resource_set().copies_in(resource_set(), 7) == 7);
}

TEST_CASE("shortfalls say which resource lacks how much", "[core]") {
  const auto missing = shortfalls(resource_set({{"CPU", 8}, {"GPU", 1}, {"memory", 6.4e10}}),
                                  resource_set({{"CPU", 6}, {"memory", 6.4e10}}));
  REQUIRE(missing.size() == 2);
  CHECK(describe(missing) == "CPU 2 (needs 8, has 6), GPU 1 (needs 1, has 0)");
  CHECK(resource_set({{"GPU", 0.5}, {"CPU", 4}}).to_string() == "{CPU: 4, GPU: 0.5}");
  CHECK(format_quantity(6.4e10) == "64000000000");
  CHECK(format_quantity(0.01) == "0.01");
}

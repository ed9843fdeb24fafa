// NODES.json and resource objects: good lists and errors with JSON paths.
#include <catch2/catch.hpp>

#include "config/nodes_spec.hpp"
#include "tests/config/spec_test_support.hpp"

using namespace cohort::config;
using cohort::config::testing::expect_spec_error;

TEST_CASE("a NODES.json list parses into names and fractional resources", "[config]") {
  const auto nodes = parse_nodes_json(
      R"([{"name": "n1", "resources": {"CPU": 8, "GPU": 1, "memory": 6.4e10, "large_cpu_mem": 1}},
          {"name": "n2", "resources": {"CPU": 4, "GPU": 0.5}, "gpu_memory": 2.4e10}])");
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0].gpu_memory_bytes == 0);  // not given: unknown
  CHECK(nodes[1].gpu_memory_bytes == 24'000'000'000);
  CHECK(nodes[0].name == "n1");
  CHECK(nodes[0].resources == resource_quantities{{"CPU", 8}, {"GPU", 1}, {"memory", 6.4e10},
                                                   {"large_cpu_mem", 1}});
  CHECK(nodes[1].name == "n2");
  CHECK(nodes[1].resources.at("GPU") == 0.5);
}

TEST_CASE("bad NODES.json entries name the JSON path of the problem", "[config]") {
  struct bad {
    const char* text;
    const char* path;
    const char* message;
  };
  const bad cases[] = {
      {R"([{"name": "n1", "resources": {"CPU": 8}}, {"name": "n2", "resources": {"CPU": -1}}])",
       "[1].resources.CPU", "got -1; expected a number >= 0"},
      {R"([{"name": "n1", "resources": {"CPU": "8"}}])", "[0].resources.CPU", "a number >= 0"},
      {R"([{"resources": {"CPU": 8}}])", "[0].name", "missing"},
      {R"([{"name": "n1"}])", "[0].resources", "missing"},
      {R"([{"name": "n1", "resources": {}, "gpus": 2}])", "[0].gpus", "unknown key"},
      {R"([{"name": "n 1", "resources": {}}])", "[0].name", "[A-Za-z0-9._:-]"},
      {R"([{"name": "a", "resources": {}}, {"name": "a", "resources": {}}])", "[1].name",
       "more than once"},
      {R"([{"name": "n1", "resources": {}, "gpu_memory": -1}])", "[0].gpu_memory", "a number >= 0"},
      {R"([3])", "[0]", "a JSON object"},
      {R"([])", "", "a non-empty array"},
      {R"({"name": "n1"})", "", "a non-empty array"},
      {R"([{"name": "n1", "resources": )", "", "not valid JSON"},
  };
  for (const auto& c : cases) {
    INFO("nodes: " << c.text);
    const spec_error e = expect_spec_error([&] { parse_nodes_json(c.text); });
    INFO("message: " << e.what());
    CHECK(e.path() == c.path);
    CHECK_THAT(e.what(), Catch::Contains(c.message));
  }
}

TEST_CASE("a missing NODES.json file is an error naming it", "[config]") {
  const spec_error e = expect_spec_error([] { load_nodes_file("/nonexistent/NODES.json"); });
  CHECK_THAT(e.what(), Catch::Contains("/nonexistent/NODES.json"));
}

TEST_CASE("a resource object from the command line parses with its option named in errors",
          "[config]") {
  CHECK(parse_resources_json(R"({"large_cpu_mem": 1})", "--resources") ==
        resource_quantities{{"large_cpu_mem", 1}});
  const spec_error e = expect_spec_error([] { parse_resources_json(R"({"x": -2})", "--resources"); });
  CHECK(e.path() == "--resources.x");
  const spec_error syntax = expect_spec_error([] { parse_resources_json("{", "--resources"); });
  CHECK(syntax.path() == "--resources");
}

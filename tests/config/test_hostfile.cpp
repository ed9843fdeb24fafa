// Hostfile node lists (cohort-bench --nodes): names and slots, comments, and errors naming file:line.
#include <catch2/catch.hpp>

#include "config/hostfile.hpp"
#include "config/job_spec.hpp"
#include "tests/config/spec_test_support.hpp"

using namespace cohort::config;
using cohort::config::testing::expect_spec_error;

TEST_CASE("a hostfile lists nodes in order with their slots, skipping comments and blank lines", "[config]") {
  const auto hosts = parse_hostfile("# the bench nodes\n\nn1 slots=4\n  gpu-2.example:a   # spare\nn3 slots=1\n",
                                    "nodes.txt");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].name == "n1");
  CHECK(hosts[0].slots == 4);
  CHECK(hosts[1].name == "gpu-2.example:a");
  CHECK(hosts[1].slots == 1);
  CHECK(hosts[2].name == "n3");
}

TEST_CASE("a bad hostfile line is refused naming the file, the line and what is allowed", "[config]") {
  struct bad {
    const char* text;
    const char* where;
    const char* message;
  };
  const bad cases[] = {
      {"n1\nn/2\n", "nodes.txt:2", "node name \"n/2\" is not one"},
      {"n1\n\nn1 slots=2\n", "nodes.txt:3", "node \"n1\" is listed twice"},
      {"n1 slots=0\n", "nodes.txt:1", "slots=0 for node n1 is not a number of workers; allowed: an integer from 1"},
      {"n1 slots=2x\n", "nodes.txt:1", "slots=2x"},
      {"n1 slots=\n", "nodes.txt:1", "allowed: an integer from 1 to 65536"},
      {"n1 slots=1 slots=2\n", "nodes.txt:1", "slots= is given twice"},
      {"n1 cpus=2\n", "nodes.txt:1", "\"cpus=2\" after node n1 is not slots=N"},
      {"# nothing\n\n", "nodes.txt", "lists no node"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    const spec_error e = expect_spec_error([&] { parse_hostfile(c.text, "nodes.txt"); });
    CHECK(e.path() == c.where);
    CHECK_THAT(e.what(), Catch::StartsWith(std::string(c.where) + ": ") && Catch::Contains(c.message));
  }
  const spec_error missing = expect_spec_error([] { load_hostfile("/nonexistent/nodes.txt"); });
  CHECK_THAT(missing.what(), Catch::Contains("/nonexistent/nodes.txt") && Catch::Contains("cannot read"));
}

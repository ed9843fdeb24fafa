// The open-files limit of cohort's processes (core/proc/open_files.hpp): raised to the hard limit
// and said, and the warning for a rank whose limit is below what its job's size needs.
#include <sys/resource.h>

#include <catch2/catch.hpp>

#include "core/proc/open_files.hpp"
#include "tests/support/child_output.hpp"

using namespace cohort::core::proc;

namespace {

// raise_open_files_limit() in a child whose limits were set to (soft, hard) first: its description
// and the soft limit the child then has, as "DESCRIPTION|SOFT".
std::string raised_in_child(rlim_t soft, rlim_t hard) {
  return cohort::test::output_of_child([&] {
    const rlimit set{soft, hard};
    if (::setrlimit(RLIMIT_NOFILE, &set) != 0) return std::string("cannot set the limits");
    const auto limit = raise_open_files_limit();
    rlimit now{};
    ::getrlimit(RLIMIT_NOFILE, &now);
    return describe(limit) + "|" + std::to_string(now.rlim_cur);
  });
}

}  // namespace

TEST_CASE("a process raises its soft open-files limit to the hard limit and says from what", "[core]") {
  CHECK(raised_in_child(256, 512) == "open files: 512 (raised from 256, the hard limit)|512");
}

TEST_CASE("a soft open-files limit already at the hard limit is said as such", "[core]") {
  CHECK(raised_in_child(300, 300) == "open files: 300 (the hard limit)|300");
}

TEST_CASE("what a rank may hold open grows with its job's size", "[core]") {
  CHECK(open_files_per_rank(1) == 256);
  CHECK(open_files_per_rank(2) == 264);
  CHECK(open_files_per_rank(257) == 256 + 8 * 256);
}

TEST_CASE(
    "a rank whose open-files limit is below what its job's size needs is warned, naming the node "
    "and the numbers; one with enough is not",
    "[core]") {
  CHECK_FALSE(open_files_warning(1024, 2, "n1"));
  CHECK_FALSE(open_files_warning(264, 2, "n1"));
  const auto warning = open_files_warning(1024, 256, "gpu-07");
  REQUIRE(warning);
  CHECK_THAT(*warning, Catch::StartsWith("node gpu-07: the open-files limit is 1024, below the about 2296 a "
                                         "rank of a job of 256 ranks may hold open"));
  CHECK_THAT(*warning, Catch::Contains("Too many open files"));
}

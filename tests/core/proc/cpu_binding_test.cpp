// A rank's share of its node's CPUs (core/proc/cpu_binding.hpp): contiguous parts in order, the
// first ones larger by one, one CPU each when there are fewer CPUs than ranks, within NUMA nodes
// on a host of several; the text of a CPU list and its reading; and a binding that reaches the
// threads the process already has.
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "core/proc/cpu_binding.hpp"
#include "tests/support/child_output.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::proc;

namespace {

std::vector<int> range(int first, int last) {  // first..last
  std::vector<int> out;
  for (int c = first; c <= last; ++c) out.push_back(c);
  return out;
}

}  // namespace

TEST_CASE(
    "the CPUs are split among a node's ranks in contiguous parts, in order, the first parts "
    "one larger",
    "[core][proc]") {
  CHECK(cpu_share(range(0, 15), 0, 2) == range(0, 7));
  CHECK(cpu_share(range(0, 15), 1, 2) == range(8, 15));
  CHECK(cpu_share(range(0, 9), 0, 3) == range(0, 3));
  CHECK(cpu_share(range(0, 9), 1, 3) == range(4, 6));
  CHECK(cpu_share(range(0, 9), 2, 3) == range(7, 9));
  CHECK(cpu_share({0, 2, 4, 6}, 1, 2) == std::vector<int>{4, 6});  // the allowed ones, not their ids
  CHECK(cpu_share(range(0, 3), 0, 1) == range(0, 3));
}

TEST_CASE("with fewer CPUs than ranks each rank gets one, shared in turn", "[core][proc]") {
  CHECK(cpu_share({3, 5}, 0, 3) == std::vector<int>{3});
  CHECK(cpu_share({3, 5}, 1, 3) == std::vector<int>{5});
  CHECK(cpu_share({3, 5}, 2, 3) == std::vector<int>{3});
}

TEST_CASE("a share is refused for no CPUs or a local rank outside the ranks, naming it", "[core][proc]") {
  CHECK_THROWS_WITH(cpu_share({}, 0, 1), Catch::Contains("no CPUs"));
  CHECK_THROWS_WITH(cpu_share(range(0, 3), 2, 2), Catch::Contains("local rank 2 of 2"));
  CHECK_THROWS_WITH(cpu_share(range(0, 3), -1, 2), Catch::Contains("local rank -1 of 2"));
}

TEST_CASE("a CPU list is written as ranges", "[core][proc]") {
  CHECK(cpu_list_text({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(cpu_list_text({5}) == "5");
  CHECK(cpu_list_text({}).empty());
}

TEST_CASE("a CPU list is read from its ranges, and a text that is not one is refused naming it",
          "[core][proc]") {
  CHECK(parse_cpu_list("0-3,8,10-11\n") == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("7") == std::vector<int>{7});
  CHECK(parse_cpu_list("").empty());  // a node of memory only
  CHECK(parse_cpu_list(cpu_list_text(range(4, 9))) == range(4, 9));
  for (const char* bad : {"3-1", "a", "1,,2", "1-", "-2"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_cpu_list(bad), Catch::Contains(std::string("\"") + bad + "\" is not a CPU list"));
  }
}

TEST_CASE("the NUMA nodes are read in their numbers' order from the kernel's node directory",
          "[core][proc]") {
  cohort::test::temp_dir dir;
  const auto node = [&](const std::string& name, const std::string& cpulist) {
    std::filesystem::create_directories(dir.path() / name);
    std::ofstream(dir.path() / name / "cpulist") << cpulist << "\n";
  };
  CHECK(numa_node_cpus(dir.str()).empty());
  node("node10", "8-9");
  node("node0", "0-3");
  node("node1", "4-7");
  std::ofstream(dir.path() / "possible") << "0-1\n";  // not a node
  CHECK(numa_node_cpus(dir.str()) == std::vector<std::vector<int>>{range(0, 3), range(4, 7), range(8, 9)});
  CHECK(numa_node_cpus(dir.str() + "/missing").empty());
  node("node2", "x");
  CHECK_THROWS_WITH(numa_node_cpus(dir.str()), Catch::Contains("node2/cpulist") && Catch::Contains("\"x\""));
}

TEST_CASE(
    "on a host of several NUMA nodes each rank's share lies within one node, or spans whole nodes when "
    "there are fewer ranks than nodes",
    "[core][proc]") {
  const std::vector<std::vector<int>> two{range(0, 3), range(4, 7)};
  CHECK(numa_cpu_share(range(0, 7), two, 0, 2) == range(0, 3));
  CHECK(numa_cpu_share(range(0, 7), two, 1, 2) == range(4, 7));
  CHECK(numa_cpu_share(range(0, 7), two, 1, 4) == range(2, 3));
  CHECK(numa_cpu_share(range(0, 7), two, 2, 4) == range(4, 5));
  // Three ranks on two nodes: two share the first node, the third has the second to itself.
  CHECK(numa_cpu_share(range(0, 7), two, 1, 3) == range(2, 3));
  CHECK(numa_cpu_share(range(0, 7), two, 2, 3) == range(4, 7));
  CHECK(numa_cpu_share(range(0, 7), two, 0, 1) == range(0, 7));
  // Nodes whose CPUs interleave (0-3 and 8-11 on node 0): by node, not by number.
  const std::vector<std::vector<int>> interleaved{{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}};
  CHECK(numa_cpu_share(range(0, 15), interleaved, 0, 2) == std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11});
  CHECK(cpu_share(range(0, 15), 0, 2) == range(0, 7));  // what the split by number would give
  // Only the allowed CPUs count; a CPU of no node is a group of its own.
  CHECK(numa_cpu_share(range(2, 5), two, 0, 2) == range(2, 3));
  CHECK(numa_cpu_share(range(0, 8), two, 2, 3) == std::vector<int>{8});
  // One node, or none known: the plain split.
  CHECK(numa_cpu_share(range(0, 9), {range(0, 9)}, 1, 3) == cpu_share(range(0, 9), 1, 3));
  CHECK(numa_cpu_share(range(0, 9), {}, 2, 3) == cpu_share(range(0, 9), 2, 3));
  CHECK_THROWS_WITH(numa_cpu_share(range(0, 7), two, 2, 2), Catch::Contains("local rank 2 of 2"));
}

TEST_CASE("binding the process reaches a thread it started before, and every thread after", "[core][proc]") {
  const auto allowed = allowed_cpus();
  REQUIRE_FALSE(allowed.empty());
  const int target = allowed.back();
  const auto got = cohort::test::output_of_child([&] {  // one thread waiting, the binding, then each thread's CPUs
    std::mutex m;
    std::condition_variable cv;
    bool bound = false;
    std::string before_thread;
    std::thread earlier([&] {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return bound; });
      before_thread = cpu_list_text(allowed_cpus());
    });
    bind_process_to_cpus({target});
    {
      std::lock_guard<std::mutex> lock(m);
      bound = true;
    }
    cv.notify_all();
    earlier.join();
    std::string after_thread;
    std::thread later([&] { after_thread = cpu_list_text(allowed_cpus()); });
    later.join();
    return cpu_list_text(allowed_cpus()) + "|" + before_thread + "|" + after_thread;
  });
  const auto t = std::to_string(target);
  CHECK(got == t + "|" + t + "|" + t);
  CHECK(allowed_cpus() == allowed);  // the test process itself is not bound
}

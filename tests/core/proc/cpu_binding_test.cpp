// A rank's share of its node's CPUs (core/proc/cpu_binding.hpp): contiguous parts in order, the
// first ones larger by one, one CPU each when there are fewer CPUs than ranks; the text of a CPU
// list; and a binding that reaches the threads the process already has.
#include <condition_variable>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "core/proc/cpu_binding.hpp"
#include "tests/support/child_output.hpp"

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

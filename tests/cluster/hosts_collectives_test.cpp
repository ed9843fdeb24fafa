// Gloo ranks on two hosts of the rig (host_rig.hpp), built as a job's rank builds its group
// (group_options.gloo_hostname = the node's address): where a rank listens while it waits for its
// peer, and that the group reduces across the hosts.
#include <ATen/ATen.h>

#include <future>

#include "core/comm/memory_store.hpp"
#include "core/comm/process_group.hpp"
#include "tests/cluster/host_rig.hpp"
#include "tests/support/catch_torch.hpp"

using cohort::test::host_rig;
using namespace std::chrono_literals;
namespace comm = cohort::core::comm;

namespace {

// Rank `rank` of a 2-rank Gloo group joined from inside `host` at the host's address; returns the
// sum over both ranks of (rank + 1), all-reduced through the group.
float reduce_from(const host_rig& rig, int host, int rank, std::shared_ptr<comm::store> store) {
  return rig.in_host(host, [&] {
    comm::group_options o;
    o.rank = rank;
    o.world_size = 2;
    o.rendezvous = std::move(store);
    o.key_prefix = "across/";
    o.timeout = 60s;
    o.gloo_hostname = rig.address(host);
    auto group = comm::make_process_group(o);
    auto t = at::full({4}, static_cast<float>(rank + 1));
    group->all_reduce(t, comm::reduce_op::sum)->wait(60s);
    return t[3].item<float>();
  });
}

}  // namespace

TEST_CASE("a Gloo rank listens on its node's address only, not on every address of its host, and "
          "its group reduces across hosts",
          "[hosts][comm]") {
  COHORT_NEED_HOSTS();
  host_rig rig(2);
  // A second address on host 0's interface: a rank listening on every address would take it too.
  cohort::test::ip_command({"-n", rig.netns(0), "addr", "add", "10.213.0.101/24", "dev", "eth0"});
  auto store = std::make_shared<comm::memory_store>();
  auto rank0 = std::async(std::launch::async, [&] { return reduce_from(rig, 0, 0, store); });

  // Rank 0 listens for rank 1 before it waits for rank 1's address in the store.
  std::vector<std::string> sockets;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (sockets.empty() && std::chrono::steady_clock::now() < deadline) {
    sockets = rig.listening(0);
    if (sockets.empty()) std::this_thread::sleep_for(10ms);
  }
  INFO("listening in host 0:" << [&] {
    std::string all;
    for (const auto& s : sockets) all += " " + s;
    return all;
  }());
  REQUIRE_FALSE(sockets.empty());
  for (const auto& s : sockets) CHECK(s.rfind(rig.address(0) + ":", 0) == 0);

  auto rank1 = std::async(std::launch::async, [&] { return reduce_from(rig, 1, 1, store); });
  CHECK(rank0.get() == 3.0f);
  CHECK(rank1.get() == 3.0f);
}

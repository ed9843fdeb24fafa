// The GPU fields of the wire messages (node_info's GPUs, each rank's GPU indices, the node list of
// job_list) survive the codec between processes.
#include <catch2/catch.hpp>

#include "actors/messages.hpp"
#include "actors/wire_protocol.hpp"

using namespace cohort::actors;

namespace {

template <class T>
T round_trip(const T& msg) {
  auto codec = make_wire_codec();
  const std::string frame = codec->encode(msg);
  auto decoded = codec->decode(frame.data(), frame.size());
  INFO(decoded.detail);
  REQUIRE(decoded.ok());
  REQUIRE(decoded.message.match_element<T>(0));
  return decoded.message.get_as<T>(0);
}

node_info h100_node() {
  node_info n{"n1", {{"CPU", 64}, {"GPU", 2}, {"accelerator_type:NVIDIA_H100_80GB_HBM3", 1}}};
  n.gpu_memory_bytes = 85899345920;
  n.accelerator_type = "NVIDIA H100 80GB HBM3";
  n.gpu_ids = {"GPU-aaaa", "GPU-bbbb"};
  return n;
}

}  // namespace

TEST_CASE("a node's GPUs cross the wire in node_hello and job_list", "[actors]") {
  auto hello = round_trip(node_hello{h100_node()});
  CHECK(hello.info.gpu_memory_bytes == 85899345920);
  CHECK(hello.info.accelerator_type == "NVIDIA H100 80GB HBM3");
  CHECK(hello.info.gpu_ids == std::vector<std::string>{"GPU-aaaa", "GPU-bbbb"});
  CHECK(hello.info.resources.at("accelerator_type:NVIDIA_H100_80GB_HBM3") == 1);
  node_info cpu{"cpu", {{"CPU", 2}}};
  cpu.gpu_note = "no NVIDIA driver";
  auto list = round_trip(job_list{{}, {h100_node(), cpu}});
  REQUIRE(list.nodes.size() == 2);
  CHECK(list.nodes[0].gpu_ids.size() == 2);
  CHECK(list.nodes[1].gpu_note == "no NVIDIA driver");
}

TEST_CASE("each rank's GPU indices cross the wire to the trainer and the worker", "[actors]") {
  trainer_setup t{"job-0001", {}, 0, "n1", {"n1", "n1", "n2"}, {{0, 1}, {2, 3}, {}}};
  CHECK(round_trip(start_trainer{t}).setup.rank_gpus ==
        std::vector<std::vector<std::int32_t>>{{0, 1}, {2, 3}, {}});
  worker_setup w;
  w.gpus = {3, 1};
  CHECK(round_trip(start_worker{w}).setup.gpus == std::vector<std::int32_t>{3, 1});
  job_record r;
  r.rank_gpus = {{1}, {0}};
  CHECK(round_trip(r).rank_gpus == std::vector<std::vector<std::int32_t>>{{1}, {0}});
}

// How a node's record describes the GPUs it offers: GPU count, Ray's accelerator_type tags, the
// model, the smallest GPU's memory and the ids CUDA_VISIBLE_DEVICES will name them by.
#include <catch2/catch.hpp>

#include "tools/machine.hpp"

using cohort::actors::node_info;
using cohort::core::resources::gpu_device;
using cohort::core::resources::gpu_discovery;

TEST_CASE("a node's record carries its GPUs, their model, tags, smallest memory and ids", "[tools]") {
  node_info n{"n1", {{"CPU", 16}}};
  cohort::tools::add_gpu_offer(
      n, gpu_discovery{{gpu_device{0, "NVIDIA H100 80GB HBM3", "GPU-aaaa", "00000000:19:00.0", 85899345920},
                        gpu_device{2, "NVIDIA A100-SXM4-40GB", "GPU-cccc", "00000000:3B:00.0", 42949672960},
                        gpu_device{3, "NVIDIA H100 80GB HBM3", "", "00000000:5D:00.0", 85899345920}},
                       ""});
  CHECK(n.resources.at("GPU") == 3);
  CHECK(n.resources.at("accelerator_type:NVIDIA_H100_80GB_HBM3") == 1);
  CHECK(n.resources.at("accelerator_type:NVIDIA_A100-SXM4-40GB") == 1);
  CHECK(n.accelerator_type == "NVIDIA H100 80GB HBM3, NVIDIA A100-SXM4-40GB");
  CHECK(n.gpu_memory_bytes == 42949672960);
  CHECK(n.gpu_ids == std::vector<std::string>{"GPU-aaaa", "GPU-cccc", "3"});
  CHECK(n.gpu_note.empty());
}

TEST_CASE("a node without GPUs offers none and keeps the reason", "[tools]") {
  node_info n{"n1", {{"CPU", 16}}};
  cohort::tools::add_gpu_offer(n, gpu_discovery{{}, "no NVIDIA driver: libnvidia-ml.so.1 cannot be loaded"});
  CHECK(n.resources.count("GPU") == 0);
  CHECK(n.resources.size() == 1);
  CHECK(n.gpu_ids.empty());
  CHECK(n.gpu_memory_bytes == 0);
  CHECK(n.gpu_note == "no NVIDIA driver: libnvidia-ml.so.1 cannot be loaded");
}

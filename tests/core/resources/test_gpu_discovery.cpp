// GPU discovery without a GPU: which devices CUDA_VISIBLE_DEVICES lets a process see, a missing
// NVML (zero GPUs, quietly), Ray's accelerator_type tag, and what a node offers for --num-gpus.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "core/resources/gpu_discovery.hpp"
#include "tests/support/scoped_env.hpp"

using namespace cohort::core::resources;

namespace {

std::vector<gpu_device> two_h100() {
  return {gpu_device{0, "NVIDIA H100 80GB HBM3", "GPU-aaaa1111-0000", "00000000:19:00.0", 85899345920},
          gpu_device{1, "NVIDIA H100 80GB HBM3", "GPU-bbbb2222-0000", "00000000:3B:00.0", 85899345920}};
}

// Environment variables to set, or (nullopt) to unset.
using env_vars = std::map<std::string, std::optional<std::string>>;

// Sets (or unsets) environment variables for one test and puts the old values back.
class scoped_envs {
 public:
  explicit scoped_envs(const env_vars& vars) {
    for (const auto& [name, value] : vars)
      held_.push_back(std::make_unique<cohort::test::scoped_env>(name, value ? value->c_str() : nullptr));
  }

 private:
  std::vector<std::unique_ptr<cohort::test::scoped_env>> held_;
};

const std::string two_fake_gpus =
    "NVIDIA H100 80GB HBM3|GPU-aaaa1111-0000|00000000:19:00.0|85899345920;"
    "NVIDIA H100 80GB HBM3|GPU-bbbb2222-0000|00000000:3B:00.0|85899345920";

std::vector<unsigned> device_indices(const std::vector<gpu_device>& devices) {
  std::vector<unsigned> out;
  for (const auto& d : devices) out.push_back(d.index);
  return out;
}

}  // namespace

TEST_CASE("CUDA_VISIBLE_DEVICES selects GPUs by index or UUID prefix, in its order", "[core]") {
  const auto all = two_h100();
  CHECK(device_indices(select_visible(all, std::nullopt)) == std::vector<unsigned>{0, 1});
  CHECK(device_indices(select_visible(all, std::string("1"))) == std::vector<unsigned>{1});
  CHECK(device_indices(select_visible(all, std::string("1,0"))) == std::vector<unsigned>{1, 0});
  CHECK(device_indices(select_visible(all, std::string("GPU-bbbb2222-0000"))) == std::vector<unsigned>{1});
  CHECK(device_indices(select_visible(all, std::string(" GPU-aaaa , 1"))) == std::vector<unsigned>{0, 1});
  CHECK(device_indices(select_visible(all, std::string("0,0"))) == std::vector<unsigned>{0});
}

TEST_CASE("CUDA_VISIBLE_DEVICES stops at the first entry that names no GPU, as CUDA does", "[core]") {
  const auto all = two_h100();
  CHECK(select_visible(all, std::string("")).empty());
  CHECK(select_visible(all, std::string("-1")).empty());
  CHECK(device_indices(select_visible(all, std::string("1,7,0"))) == std::vector<unsigned>{1});
  CHECK(select_visible(all, std::string("GPU-")).empty());  // ambiguous prefix
  CHECK(select_visible(all, std::string("MIG-GPU-aaaa1111-0000/1/0")).empty());
}

TEST_CASE("without an NVML library no GPUs are found and the note says why", "[core]") {
  auto found = discover_gpus("/nonexistent/libnvidia-ml.so.1");
  CHECK(found.devices.empty());
  CHECK_THAT(found.note, Catch::Contains("no NVIDIA driver"));
  CHECK_THAT(found.note, Catch::Contains("/nonexistent/libnvidia-ml.so.1"));
}

TEST_CASE("the accelerator_type tag is the model with spaces as underscores", "[core]") {
  CHECK(accelerator_type_tag("NVIDIA H100 80GB HBM3") == "accelerator_type:NVIDIA_H100_80GB_HBM3");
  CHECK(accelerator_type_tag("Tesla V100-SXM2-16GB") == "accelerator_type:Tesla_V100-SXM2-16GB");
  CHECK(accelerator_type_tag("") == "");
  CHECK(describe_gpus(two_h100()) == "2 GPUs (NVIDIA H100 80GB HBM3)");
  CHECK(gpu_device{3, "x", "", "", 0}.visible_id() == "3");
  CHECK(two_h100()[1].visible_id() == "GPU-bbbb2222-0000");
}

TEST_CASE("a node offers every GPU found unless --num-gpus asks for fewer", "[core]") {
  const gpu_discovery found{two_h100(), ""};
  CHECK(choose_gpu_offer(found, std::nullopt, true, "--num-gpus").devices.size() == 2);
  auto one = choose_gpu_offer(found, 1.0, true, "--num-gpus");
  REQUIRE(one.devices.size() == 1);
  CHECK(one.devices[0].index == 0);
  CHECK(choose_gpu_offer(found, 0.0, true, "--num-gpus").devices.empty());
}

TEST_CASE("asking for more GPUs than found is an error naming both numbers", "[core]") {
  const gpu_discovery found{two_h100(), ""};
  try {
    choose_gpu_offer(found, 4.0, true, "--num-gpus");
    FAIL("expected a resource_error");
  } catch (const resource_error& e) {
    CHECK(std::string(e.what()) == "--num-gpus 4: this machine has 2 GPUs (NVIDIA H100 80GB HBM3)");
  }
  CHECK_THROWS_WITH(choose_gpu_offer(found, 1.5, true, "--num-gpus"),
                    Catch::Contains("--num-gpus 1.5: expected a whole number"));
  CHECK_THROWS_WITH(choose_gpu_offer(gpu_discovery{{}, "no NVIDIA driver"}, 1.0, true, "--num-gpus"),
                    "--num-gpus 1: this machine has 0 GPUs (no NVIDIA driver)");
}

TEST_CASE("a build without CUDA offers no GPUs and says so", "[core]") {
  const gpu_discovery found{two_h100(), ""};
  auto offer = choose_gpu_offer(found, std::nullopt, false, "--num-gpus");
  CHECK(offer.devices.empty());
  CHECK_THAT(offer.note, Catch::StartsWith(no_cuda_text));
  CHECK_THAT(offer.note, Catch::Contains("2 GPUs (NVIDIA H100 80GB HBM3) found but not offered"));
  CHECK_THROWS_WITH(choose_gpu_offer(found, 1.0, false, "--num-gpus"),
                    std::string("--num-gpus 1: ") + no_cuda_text);
}

TEST_CASE("NVML's devices are read with their model, UUID, bus id and memory", "[core]") {
  scoped_envs env(env_vars{
      {"FAKE_NVML_DEVICES", two_fake_gpus}, {"FAKE_NVML_FAIL", ""}, {"CUDA_VISIBLE_DEVICES", std::nullopt}});
  auto found = discover_gpus(COHORT_FAKE_NVML);
  INFO(found.note);
  REQUIRE(found.devices.size() == 2);
  CHECK(found.note.empty());
  CHECK(found.devices[1].index == 1);
  CHECK(found.devices[1].name == "NVIDIA H100 80GB HBM3");
  CHECK(found.devices[1].uuid == "GPU-bbbb2222-0000");
  CHECK(found.devices[1].pci_bus_id == "00000000:3B:00.0");
  CHECK(found.devices[1].memory_bytes == 85899345920);
}

TEST_CASE("discovery honours the process's CUDA_VISIBLE_DEVICES", "[core]") {
  scoped_envs env(env_vars{{"FAKE_NVML_DEVICES", two_fake_gpus},
                           {"FAKE_NVML_FAIL", ""},
                           {"CUDA_VISIBLE_DEVICES", "GPU-bbbb2222-0000"}});
  auto found = discover_gpus(COHORT_FAKE_NVML);
  REQUIRE(found.devices.size() == 1);
  CHECK(found.devices[0].uuid == "GPU-bbbb2222-0000");
  scoped_envs none(env_vars{{"CUDA_VISIBLE_DEVICES", ""}});
  auto hidden = discover_gpus(COHORT_FAKE_NVML);
  CHECK(hidden.devices.empty());
  CHECK(hidden.note == "CUDA_VISIBLE_DEVICES=\"\" names none of the 2 GPUs");
}

TEST_CASE("an NVML that fails gives zero GPUs and names the call and the error", "[core]") {
  scoped_envs init(env_vars{{"FAKE_NVML_DEVICES", two_fake_gpus},
                            {"FAKE_NVML_FAIL", "init"},
                            {"CUDA_VISIBLE_DEVICES", std::nullopt}});
  auto no_driver = discover_gpus(COHORT_FAKE_NVML);
  CHECK(no_driver.devices.empty());
  CHECK(no_driver.note == "nvmlInit_v2 failed: Driver Not Loaded (NVML code 9)");
  scoped_envs memory(env_vars{{"FAKE_NVML_FAIL", "memory"}});
  auto broken = discover_gpus(COHORT_FAKE_NVML);
  CHECK(broken.devices.empty());
  CHECK(broken.note == "nvmlDeviceGetMemoryInfo (GPU 0) failed: Unknown Error (NVML code 999)");
}

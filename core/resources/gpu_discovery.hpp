// GPU discovery for a node: which NVIDIA GPUs this process may use (count, model, memory, UUID,
// PCI bus id), read through NVML loaded at run time with dlopen, so a build without CUDA links no
// CUDA library. Contract:
//   - NVML absent (no driver): zero GPUs, no error; `note` says why, for messages.
//   - NVML present but failing (init, a query): zero GPUs; `note` names the call and NVML's error.
//   - CUDA_VISIBLE_DEVICES, when set, restricts the result the way CUDA does: entries are NVML
//     indices or GPU UUIDs (a unique "GPU-" prefix is enough), in the order given; the list stops
//     at the first entry that names no GPU (CUDA's rule); duplicates count once; MIG entries are
//     not supported and stop the list. Set but empty: no GPUs.
// Plain functions, no state; safe from any thread (NVML is initialised and shut down per call).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/resources/resource_set.hpp"

namespace cohort::core::resources {

struct gpu_device {
  unsigned index = 0;        // NVML's index (PCI bus order)
  std::string name;          // "NVIDIA H100 80GB HBM3"
  std::string uuid;          // "GPU-5d1c3a0e-..."
  std::string pci_bus_id;    // "00000000:19:00.0"
  std::int64_t memory_bytes = 0;
  // How this node names the GPU to a worker in CUDA_VISIBLE_DEVICES: its UUID (immune to CUDA's
  // device ordering), else its index.
  std::string visible_id() const { return uuid.empty() ? std::to_string(index) : uuid; }
};

struct gpu_discovery {
  std::vector<gpu_device> devices;  // the GPUs this process may use, in CUDA's visible order
  std::string note;                 // why none were found ("" when NVML answered)
};

// The NVML library dlopen()ed by discover_gpus: "libnvidia-ml.so.1".
inline constexpr const char* nvml_library = "libnvidia-ml.so.1";

// Every GPU NVML reports, restricted by this process's CUDA_VISIBLE_DEVICES. `library` is the
// NVML to load (tests pass a path that does not exist).
gpu_discovery discover_gpus(const std::string& library = nvml_library);

// The devices of `all` that CUDA_VISIBLE_DEVICES=`visible` lets a process see (rules above);
// nullopt visible: all of them.
std::vector<gpu_device> select_visible(const std::vector<gpu_device>& all,
                                       const std::optional<std::string>& visible);

// Ray's custom resource tag for a GPU model: "accelerator_type:" + model with spaces (and any
// character a resource name may not hold) as '_' ("accelerator_type:NVIDIA_H100_80GB_HBM3"); ""
// for an empty model.
std::string accelerator_type_tag(const std::string& model);

// "2 GPUs (NVIDIA H100 80GB HBM3)", "1 GPU (A, B)", "0 GPUs" for messages.
std::string describe_gpus(const std::vector<gpu_device>& devices);

// The GPUs a node offers: the first `requested` of those found (all of them when not given); none
// in a build without CUDA (`cuda`: whether this build has it). `note` says why none are offered.
// Throws resource_error naming `flag` and both numbers when more are requested than found
// ("--num-gpus 4: this machine has 2 GPUs (NVIDIA H100 80GB HBM3)"), or for a count that is
// negative or not whole.
gpu_discovery choose_gpu_offer(const gpu_discovery& found, std::optional<double> requested,
                               bool cuda, const std::string& flag);

// Whether this build of cohort has the CUDA backends (configured with COHORT_CUDA=ON).
bool cuda_build();
// What a message says of a build without CUDA.
inline constexpr const char* no_cuda_text =
    "this build of cohort has no CUDA (configured with COHORT_CUDA=OFF)";

}  // namespace cohort::core::resources

// MFU: FLOPs per token, the peak table and the device name (see mfu.hpp).
#include "core/train/mfu.hpp"

#include <array>
#include <utility>

#ifdef COHORT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cohort::core::train {

double flops_per_token(std::int64_t params, std::int64_t layers, std::int64_t hidden,
                       std::int64_t seq_len) {
  return 6.0 * static_cast<double>(params) +
         12.0 * static_cast<double>(layers) * static_cast<double>(hidden) * static_cast<double>(seq_len);
}

double peak_bf16_flops(const std::string& device_name) {
  // First match wins: the NVL and PCIe variants before the SXM name they contain.
  static const std::array<std::pair<const char*, double>, 6> peaks{{
      {"H200 NVL", 835.0e12},
      {"H200", 989.4e12},  // H200 SXM
      {"H100 NVL", 835.0e12},
      {"H100 PCIe", 756.0e12},
      {"H100", 989.4e12},  // H100 SXM ("NVIDIA H100 80GB HBM3")
      {"A100", 312.0e12},
  }};
  for (const auto& [key, peak] : peaks) {
    if (device_name.find(key) != std::string::npos) return peak;
  }
  return 0;
}

std::string cuda_device_name(int index) {
#ifdef COHORT_WITH_CUDA
  cudaDeviceProp properties{};
  if (index >= 0 && cudaGetDeviceProperties(&properties, index) == cudaSuccess) return properties.name;
#else
  (void)index;
#endif
  return "";
}

double mfu(double tokens_per_s, double flops_per_token, double peak_per_device, int world_size) {
  if (peak_per_device <= 0 || world_size <= 0 || tokens_per_s <= 0) return 0;
  return tokens_per_s * flops_per_token / (peak_per_device * world_size);
}

}  // namespace cohort::core::train

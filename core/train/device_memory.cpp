// device_memory: the GPU memory cap and the peaks (see device_memory.hpp).
#include "core/train/device_memory.hpp"

#include "config/job_spec.hpp"
#include "core/train/memory_estimate.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#ifdef COHORT_WITH_CUDA
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

namespace cohort::core::train {

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

std::string gib_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / gib);
  return text;
}

// This process's resident set now (VmRSS) and its peak (VmHWM), in bytes.
struct resident_set {
  std::int64_t current = 0, peak = 0;
};
resident_set read_resident_set() {
  resident_set rss;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss.current = std::atoll(line.c_str() + 6) * 1024;  // kB
    if (line.rfind("VmHWM:", 0) == 0) rss.peak = std::atoll(line.c_str() + 6) * 1024;
  }
  return rss;
}

}  // namespace

std::int64_t requested_gpu_memory_limit() {
  const char* value = std::getenv(config::gpu_memory_limit_variable);
  if (value == nullptr || *value == '\0') return 0;
  return static_cast<std::int64_t>(gpu_memory_limit_bytes({{config::gpu_memory_limit_variable, value}}));
}

std::int64_t gpu_total_bytes(int device) {
#ifdef COHORT_WITH_CUDA
  std::size_t free_bytes = 0, total_bytes = 0;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess ||
      cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess || cudaSetDevice(previous) != cudaSuccess)
    throw std::runtime_error("cannot read the memory of CUDA device " + std::to_string(device));
  return static_cast<std::int64_t>(total_bytes);
#else
  (void)device;
  return 0;
#endif
}

std::int64_t apply_gpu_memory_limit(int device) {
  const std::int64_t limit = requested_gpu_memory_limit();
  if (limit == 0) return 0;
#ifdef COHORT_WITH_CUDA
  std::int64_t total_bytes = 0;
  try {
    total_bytes = gpu_total_bytes(device);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(config::gpu_memory_limit_variable) + ": " + e.what());
  }
  if (static_cast<double>(limit) > static_cast<double>(total_bytes))
    throw std::invalid_argument(std::string(config::gpu_memory_limit_variable) + ": " + gib_text(static_cast<double>(limit)) +
                                " is more than CUDA device " + std::to_string(device) + " has (" +
                                gib_text(static_cast<double>(total_bytes)) + ")");
  // The caching allocator starts with the device's first allocation; only then takes a fraction.
  at::empty({1}, at::TensorOptions().device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(
      static_cast<double>(limit) / static_cast<double>(total_bytes), static_cast<c10::DeviceIndex>(device));
  return limit;
#else
  (void)device;
  throw std::runtime_error(std::string(config::gpu_memory_limit_variable) +
                           " is set but this build of cohort has no CUDA (configured with COHORT_CUDA=OFF)");
#endif
}

memory_peaks read_memory_peaks(int device) {
  memory_peaks peaks;
  peaks.host_rss = read_resident_set().peak;
#ifdef COHORT_WITH_CUDA
  if (device >= 0) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    peaks.gpu_allocated = stats.allocated_bytes[0].peak;  // [0]: StatType::AGGREGATE
    peaks.gpu_reserved = stats.reserved_bytes[0].peak;
  }
#else
  (void)device;
#endif
  return peaks;
}

memory_now read_memory_now(int device) {
  memory_now now;
  const auto rss = read_resident_set();
  now.host_rss = rss.current;
  now.host_rss_peak = rss.peak;
#ifdef COHORT_WITH_CUDA
  if (device >= 0) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    now.gpu = true;
    now.gpu_allocated = stats.allocated_bytes[0].current;  // [0]: StatType::AGGREGATE
    now.gpu_reserved = stats.reserved_bytes[0].current;
    now.gpu_peak = stats.allocated_bytes[0].peak;
  }
#else
  (void)device;
#endif
  return now;
}

std::string describe(const memory_peaks& peaks) {
  std::string text;
  if (peaks.gpu_reserved > 0)
    text = "GPU peak " + gib_text(static_cast<double>(peaks.gpu_allocated)) + " allocated, " +
           gib_text(static_cast<double>(peaks.gpu_reserved)) + " reserved; ";
  return text + "host peak RSS " + gib_text(static_cast<double>(peaks.host_rss));
}

}  // namespace cohort::core::train

// A rank's memory: the GPU cap a job may ask for through its environment
// (COHORT_GPU_MEMORY_LIMIT_GB, in GiB: the CUDA caching allocator's memory fraction, so a 24 GiB
// card can be emulated on a larger one) and the peaks a rank reports (GPU bytes the caching
// allocator handed out and reserved, host RSS). No torch here; CUDA only where built with it.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::core::train {

// The cap this process's COHORT_GPU_MEMORY_LIMIT_GB asks for (the job's runtime_env.env_vars put
// it there), in bytes (0: unset). Throws invalid_argument naming the variable when it is not a
// positive number.
std::int64_t requested_gpu_memory_limit();

// Applies requested_gpu_memory_limit() to CUDA device `device` (visible index) and returns it in
// bytes (0: unset, nothing done). Throws invalid_argument naming the variable and both sizes when
// the cap exceeds the card, runtime_error on a build without CUDA when a cap is set.
std::int64_t apply_gpu_memory_limit(int device);

// The memory of CUDA device `device` (visible index) in bytes; 0 on a build without CUDA. Throws
// runtime_error when CUDA cannot read it.
std::int64_t gpu_total_bytes(int device);

struct memory_peaks {
  std::int64_t gpu_allocated = 0;  // peak bytes in tensors on the device (0 on CPU)
  std::int64_t gpu_reserved = 0;   // peak bytes the caching allocator held from the driver
  std::int64_t host_rss = 0;       // peak resident set of this process (VmHWM)
};
// The peaks so far of this process and of CUDA device `device` (-1: host only).
memory_peaks read_memory_peaks(int device);
struct memory_now {
  std::int64_t host_rss = 0;       // resident set now (VmRSS)
  std::int64_t host_rss_peak = 0;  // its peak (VmHWM)
  bool gpu = false;                // whether the GPU fields were read (CUDA device, CUDA build)
  std::int64_t gpu_allocated = 0;  // bytes in tensors on the device now
  std::int64_t gpu_reserved = 0;   // bytes the caching allocator holds from the driver now
  std::int64_t gpu_peak = 0;       // peak of gpu_allocated
};
// This process's memory now and CUDA device `device`'s (-1: host only). Thread-safe.
memory_now read_memory_now(int device);
// "GPU peak 21.3 GiB allocated, 22.0 GiB reserved; host peak RSS 40.2 GiB"
std::string describe(const memory_peaks& peaks);

}  // namespace cohort::core::train

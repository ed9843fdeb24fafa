// Sizes OpenBLAS's thread pool to torch's intra-op threads (see host_threads.hpp).
#include "core/train/host_threads.hpp"

#include <dlfcn.h>

#include <cstdlib>

#include <ATen/Parallel.h>

namespace cohort::core::train {

std::string match_blas_threads_to_torch() {
  // Looked up, not linked: the BLAS behind libtorch is whichever the system's alternatives chose.
  using set_threads_fn = void (*)(int);
  const auto set_threads = reinterpret_cast<set_threads_fn>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set_threads == nullptr) return "";
  if (std::getenv("OPENBLAS_NUM_THREADS") != nullptr) return "OpenBLAS threads from OPENBLAS_NUM_THREADS";
  const int threads = at::get_num_threads();
  set_threads(threads);
  return "OpenBLAS threads " + std::to_string(threads);
}

std::string size_host_threads(int threads) {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return "host threads from OMP_NUM_THREADS";
  at::set_num_threads(threads);
  return std::to_string(threads) + " host threads";
}

}  // namespace cohort::core::train

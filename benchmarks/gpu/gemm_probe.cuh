// What the GEMM probes (gemm_candidates.cu, gemm_graph_nodes.cu, swiglu_gemm.cu, rotary_gemm.cu)
// share: a CUDA or cuBLAS status checked (the probe stops on the first error, naming the line),
// operands filled with pseudo-random bf16 in [-0.5, 0.5) (a GPU at its power limit runs GEMMs of
// constant data faster), and a way's time over a stretch of runs back to back.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                  \
  do {                                                         \
    auto e = (x);                                              \
    if ((int)e != 0) {                                         \
      printf("err %d at %s:%d\n", (int)e, __FILE__, __LINE__); \
      exit(1);                                                 \
    }                                                          \
  } while (0)

__global__ void fill_random(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16(((x & 0xffff) / 32768.0f - 1.0f) * 0.5f);
  }
}

// `count` bf16 elements of device memory (never freed: a probe's buffers live as long as it).
inline __nv_bfloat16* bf16_buffer(size_t count) {
  __nv_bfloat16* p = nullptr;
  CK(cudaMalloc(&p, count * 2));
  return p;
}

// A cuBLAS handle with a 64 MiB workspace of its own.
inline cublasHandle_t cublas_with_workspace() {
  cublasHandle_t handle;
  CK(cublasCreate(&handle));
  void* workspace;
  CK(cudaMalloc(&workspace, 64 << 20));
  CK(cublasSetWorkspace(handle, workspace, 64 << 20));
  return handle;
}

// out (rows, cols) = x (rows, k) wᵀ, w (cols, k), all bf16 row-major, through cublasGemmEx with
// the default algorithm (ATen's path for a linear).
inline void cublas_linear(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w,
                          __nv_bfloat16* out, long rows, long cols, long k) {
  const float alpha = 1, beta = 0;
  CK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, cols, rows, k, &alpha, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k,
                  &beta, out, CUDA_R_16BF, cols, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Microseconds a run of `run` (launches on the default stream), over 40 runs back to back.
struct stretch_timer {
  cudaEvent_t start, stop;
  stretch_timer() {
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&stop));
  }
  template <class F>
  double operator()(F&& run) {
    CK(cudaEventRecord(start));
    for (int i = 0; i < 40; ++i) run();
    CK(cudaEventRecord(stop));
    CK(cudaEventSynchronize(stop));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, start, stop));
    return ms * 1000 / 40;
  }
};

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// What the GEMM probes (gemm_candidates.cu, gemm_graph_nodes.cu) share: a CUDA or cuBLAS status
// checked (the probe stops on the first error, naming the line), and operands filled with
// pseudo-random bf16 in [-0.5, 0.5) (a GPU at its power limit runs GEMMs of constant data faster).
#pragma once

#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>

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

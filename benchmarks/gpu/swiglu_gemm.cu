// cohort's own Hopper GEMM with SwiGLU in its epilogue (core/model/hopper_gemm.cu) beside cuBLAS's
// GEMM and cohort's SwiGLU kernel after it (core/model/fused_kernels.cu), at the 1.1B shape's
// gate/up projection (16384 x 2048 tokens by 11264 x 2048 weights, bf16) or the shape given:
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I../.. -o swiglu_gemm swiglu_gemm.cu \
//     ../../core/model/hopper_gemm.cu ../../core/model/fused_kernels.cu -lcublas
//   ./swiglu_gemm [rows 2*inner k]
// Checks the own kernel's g, u and h against cuBLAS's product and the SwiGLU kernel's h, the plain
// GEMM against cuBLAS, and SwiGLU's backward through the down projection (dh = dy down, then d gate
// and d up) against cuBLAS's dh and the SwiGLU backward kernel; then times each way sustained, in
// turns (12 stretches of 40 runs each, the last 8 counted, medians), and dh's product alone by
// cuBLAS and by the own plain GEMM (from a K-major weight of the same size).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>
#include "core/model/fused_kernels.hpp"
#include "core/model/hopper_gemm.hpp"
#include "gemm_probe.cuh"

namespace k = cohort::core::model::kernels;

namespace {
float bf(__nv_bfloat16 x) { return __bfloat162float(x); }

// Every element of own against ref (fp32 sums in another order: a few bf16 units at most).
bool compare(const __nv_bfloat16* ref, const __nv_bfloat16* own, size_t count, const char* what) {
  std::vector<__nv_bfloat16> r(count), o(count);
  CK(cudaMemcpy(r.data(), ref, count * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(o.data(), own, count * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  size_t bad = 0, first_bad = count;
  for (size_t i = 0; i < count; ++i) {
    const double a = bf(r[i]), e = std::fabs(a - bf(o[i]));
    if (!(e <= 0.02 + 0.01 * std::fabs(a))) {
      if (first_bad == count) first_bad = i;
      ++bad;
    }
    if (!(e <= worst)) worst = e;
  }
  printf("%s: max |diff| %.4g, %zu outside tolerance", what, worst, bad);
  if (bad) printf(", first at %zu: %g against %g", first_bad, bf(o[first_bad]), bf(r[first_bad]));
  printf("\n");
  return bad == 0;
}
}  // namespace

int main(int argc, char** argv) {
  const long M = argc > 3 ? atol(argv[1]) : 16384, N = argc > 3 ? atol(argv[2]) : 11264,
             K = argc > 3 ? atol(argv[3]) : 2048;
  const long inner = N / 2;
  if (!k::hopper_gemm_available(0) || !k::hopper_gemm_fits(M, N, K)) {
    printf("no Hopper GEMM for %ld x %ld x %ld on this device\n", M, N, K);
    return 1;
  }
  __nv_bfloat16* A = bf16_buffer((size_t)M * K);
  __nv_bfloat16* B = bf16_buffer((size_t)N * K);
  __nv_bfloat16* C_ref = bf16_buffer((size_t)M * N);
  __nv_bfloat16* C_own = bf16_buffer((size_t)M * N);
  __nv_bfloat16* H_ref = bf16_buffer((size_t)M * inner);
  __nv_bfloat16* H_own = bf16_buffer((size_t)M * inner);
  fill_random<<<1024, 256>>>(A, (size_t)M * K, 1);
  fill_random<<<1024, 256>>>(B, (size_t)N * K, 2);
  CK(cudaDeviceSynchronize());
  cublasHandle_t bl = cublas_with_workspace();
  const float alpha = 1, beta = 0;
  auto cublas_gemm = [&] { cublas_linear(bl, A, B, C_ref, M, N, K); };
  auto cublas_swiglu = [&] {
    cublas_gemm();
    CK(k::swiglu_forward(k::dtype::bf16, C_ref, H_ref, M, inner, nullptr));
  };
  auto own_plain = [&] { CK(k::hopper_linear(A, B, K, C_own, M, N, K, nullptr)); };
  auto own_swiglu = [&] {
    CK(k::hopper_linear_swiglu(A, B, B + inner * K, K, C_own, H_own, M, inner, K, nullptr));
  };

  cublas_swiglu();
  CK(cudaMemset(C_own, 0xff, (size_t)M * N * 2));
  CK(cudaMemset(H_own, 0xff, (size_t)M * inner * 2));
  own_swiglu();
  CK(cudaDeviceSynchronize());
  bool ok = compare(C_ref, C_own, (size_t)M * N, "own GEMM with SwiGLU: g|u against cuBLAS");
  ok = compare(H_ref, H_own, (size_t)M * inner, "own GEMM with SwiGLU: h against the SwiGLU kernel's") && ok;
  CK(cudaMemset(C_own, 0xff, (size_t)M * N * 2));
  own_plain();
  CK(cudaDeviceSynchronize());
  ok = compare(C_ref, C_own, (size_t)M * N, "own GEMM alone against cuBLAS") && ok;
  if (!ok) return 1;

  // SwiGLU's backward through the down projection: dY (M, H) with the down weight (H, inner).
  const long H = K;
  __nv_bfloat16* dY = bf16_buffer((size_t)M * H);
  __nv_bfloat16* Wd = bf16_buffer((size_t)H * inner);
  __nv_bfloat16* dH = bf16_buffer((size_t)M * inner);
  __nv_bfloat16* dGU_ref = bf16_buffer((size_t)M * N);
  __nv_bfloat16* dGU_own = bf16_buffer((size_t)M * N);
  fill_random<<<1024, 256>>>(dY, (size_t)M * H, 3);
  fill_random<<<1024, 256>>>(Wd, (size_t)H * inner, 4);
  auto cublas_dh = [&] {
    CK(cublasGemmEx(bl, CUBLAS_OP_N, CUBLAS_OP_N, inner, M, H, &alpha, Wd, CUDA_R_16BF, inner, dY,
                    CUDA_R_16BF, H, &beta, dH, CUDA_R_16BF, inner, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  auto cublas_backward = [&] {
    cublas_dh();
    CK(k::swiglu_backward(k::dtype::bf16, dH, C_ref, dGU_ref, M, inner, nullptr));
  };
  // The own plain GEMM at dh's shape, from the down weight's transpose (K-major: another layout,
  // the same product's size), to time the product without the backward's epilogue.
  __nv_bfloat16* WdT = bf16_buffer((size_t)H * inner);
  fill_random<<<1024, 256>>>(WdT, (size_t)H * inner, 5);
  auto own_dh = [&] { CK(k::hopper_linear(dY, WdT, H, dH, M, inner, H, nullptr)); };
  auto own_backward = [&] {
    CK(k::hopper_swiglu_input_grad(dY, Wd, inner, C_ref, dGU_own, M, inner, H, nullptr));
  };
  const bool backward_fits = k::hopper_gemm_fits(M, inner, H);
  if (backward_fits) {
    cublas_backward();
    CK(cudaMemset(dGU_own, 0xff, (size_t)M * N * 2));
    own_backward();
    CK(cudaDeviceSynchronize());
    if (!compare(dGU_ref, dGU_own, (size_t)M * N, "own GEMM with SwiGLU's backward: d gate | d up")) return 1;
  }

  stretch_timer stretch;
  std::vector<double> t_gemm, t_ref, t_plain, t_fused, t_bref, t_bown, t_bdh, t_odh;
  for (int s = 0; s < 12; ++s) {
    const double a = stretch(cublas_gemm), b = stretch(cublas_swiglu), c = stretch(own_plain),
                 d = stretch(own_swiglu);
    if (s >= 4) t_gemm.push_back(a), t_ref.push_back(b), t_plain.push_back(c), t_fused.push_back(d);
    if (!backward_fits) continue;
    const double e = stretch(cublas_backward), f = stretch(own_backward), g = stretch(cublas_dh),
                 h = stretch(own_dh);
    if (s >= 4) t_bref.push_back(e), t_bown.push_back(f), t_bdh.push_back(g), t_odh.push_back(h);
  }
  const double flop = 2.0 * M * N * (double)K;
  printf("%ld x %ld x %ld (rows x 2 inner x k)\n", M, N, K);
  printf("cuBLAS GEMM alone:          %8.1f us  %6.1f TFLOP/s\n", median_of(t_gemm),
         flop / median_of(t_gemm) / 1e6);
  printf("cuBLAS GEMM + SwiGLU kernel:%8.1f us\n", median_of(t_ref));
  printf("own GEMM alone:             %8.1f us  %6.1f TFLOP/s\n", median_of(t_plain),
         flop / median_of(t_plain) / 1e6);
  printf("own GEMM, SwiGLU inside:    %8.1f us  (%.3fx cuBLAS + SwiGLU)\n", median_of(t_fused),
         median_of(t_ref) / median_of(t_fused));
  if (backward_fits) {
    printf("cuBLAS dh + SwiGLU backward kernel: %8.1f us\n", median_of(t_bref));
    printf("own GEMM, SwiGLU backward inside:   %8.1f us  (%.3fx)\n", median_of(t_bown),
           median_of(t_bref) / median_of(t_bown));
    printf("cuBLAS dh alone:                    %8.1f us\n", median_of(t_bdh));
    printf("own GEMM alone at dh's shape:       %8.1f us\n", median_of(t_odh));
  }
  return 0;
}

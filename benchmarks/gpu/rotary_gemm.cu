// cohort's own Hopper GEMM with rotary in its epilogue (core/model/hopper_gemm.cu) beside a GEMM
// and cohort's rotary kernel after it (core/model/fused_kernels.cu), at the 1.1B shape's q/k/v
// projection (16384 tokens, 2048 hidden; q 2048, k and v 256 columns; heads of 64; 2048
// positions) or the shape given:
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I../.. -o rotary_gemm rotary_gemm.cu \
//     ../../core/model/hopper_gemm.cu ../../core/model/fused_kernels.cu -lcublas
//   ./rotary_gemm [rows q_cols k_cols v_cols hidden head_dim seq_len]
// Checks that the own kernel's q, k and v are the bits of the own plain GEMM and the rotary kernel
// after it, and the plain GEMM against cuBLAS; then times each way sustained, in turns (12
// stretches of 40 runs each, the last 8 counted, medians).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "core/model/fused_kernels.hpp"
#include "core/model/hopper_gemm.hpp"
#include "gemm_probe.cuh"

namespace k = cohort::core::model::kernels;

namespace {
float bf(__nv_bfloat16 x) { return __bfloat162float(x); }

std::vector<__nv_bfloat16> host_copy(const __nv_bfloat16* p, size_t count) {
  std::vector<__nv_bfloat16> h(count);
  CK(cudaMemcpy(h.data(), p, count * 2, cudaMemcpyDeviceToHost));
  return h;
}

// Rows of `width` columns at column `at` of a (rows, all) product, against a (rows, width) part:
// the same bits, element for element.
bool same_bits(const std::vector<__nv_bfloat16>& whole, long all, long at, const __nv_bfloat16* part,
               long rows, long width, const char* what) {
  const auto p = host_copy(part, (size_t)rows * width);
  size_t differ = 0, first = 0;
  for (long r = 0; r < rows; ++r)
    for (long c = 0; c < width; ++c) {
      const auto a = whole[(size_t)r * all + at + c], b = p[(size_t)r * width + c];
      if (*reinterpret_cast<const unsigned short*>(&a) != *reinterpret_cast<const unsigned short*>(&b)) {
        if (differ++ == 0) first = (size_t)r * width + c;
      }
    }
  printf("%s: %zu of %ld elements differ", what, differ, rows * width);
  if (differ) printf(", first at %zu", first);
  printf("\n");
  return differ == 0;
}
}  // namespace

int main(int argc, char** argv) {
  const bool given = argc > 7;
  const long M = given ? atol(argv[1]) : 16384, Q = given ? atol(argv[2]) : 2048,
             KC = given ? atol(argv[3]) : 256, V = given ? atol(argv[4]) : 256,
             K = given ? atol(argv[5]) : 2048, D = given ? atol(argv[6]) : 64,
             T = given ? atol(argv[7]) : 2048;
  const long N = Q + KC + V;
  if (!k::hopper_gemm_available(0) || !k::hopper_rotary_fits(M, {Q, KC, V}, K, D) || M % T != 0) {
    printf("no Hopper GEMM with rotary for %ld x (%ld + %ld + %ld) x %ld, heads of %ld here\n", M, Q, KC, V,
           K, D);
    return 1;
  }
  __nv_bfloat16* A = bf16_buffer((size_t)M * K);
  __nv_bfloat16* B = bf16_buffer((size_t)N * K);
  __nv_bfloat16* C_ref = bf16_buffer((size_t)M * N);
  __nv_bfloat16* C_own = bf16_buffer((size_t)M * N);
  __nv_bfloat16* R_ref = bf16_buffer((size_t)M * N);
  __nv_bfloat16* q = bf16_buffer((size_t)M * Q);
  __nv_bfloat16* kk = bf16_buffer((size_t)M * KC);
  __nv_bfloat16* v = bf16_buffer((size_t)M * V);
  fill_random<<<1024, 256>>>(A, (size_t)M * K, 1);
  fill_random<<<1024, 256>>>(B, (size_t)N * K, 2);
  // Llama's tables (base 10000), each value rounded through bf16 as the model's are.
  std::vector<float> cos_h((size_t)T * D), sin_h((size_t)T * D);
  for (long t = 0; t < T; ++t)
    for (long i = 0; i < D; ++i) {
      const double angle = t * std::pow(10000.0, -2.0 * (i % (D / 2)) / D);
      cos_h[(size_t)t * D + i] = bf(__float2bfloat16((float)std::cos(angle)));
      sin_h[(size_t)t * D + i] = bf(__float2bfloat16((float)std::sin(angle)));
    }
  float *cos_d, *sin_d;
  CK(cudaMalloc(&cos_d, cos_h.size() * 4));
  CK(cudaMalloc(&sin_d, sin_h.size() * 4));
  CK(cudaMemcpy(cos_d, cos_h.data(), cos_h.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sin_d, sin_h.data(), sin_h.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  cublasHandle_t bl = cublas_with_workspace();
  k::column_parts whole_ref, whole_own, apart;
  whole_ref.part[0] = C_ref, whole_ref.cols[0] = N;
  whole_own.part[0] = C_own, whole_own.cols[0] = N;
  apart.part[0] = R_ref, apart.cols[0] = Q;  // the rotary kernel's q, k, v apart: three blocks of one buffer
  apart.part[1] = R_ref + (size_t)M * Q, apart.cols[1] = KC;
  apart.part[2] = R_ref + (size_t)M * (Q + KC), apart.cols[2] = V;
  auto cublas_gemm = [&] { cublas_linear(bl, A, B, C_ref, M, N, K); };
  auto rotary_after = [&](const k::column_parts& in) {
    CK(k::rotary_half(k::direction::forward, k::dtype::bf16, in, apart, cos_d, sin_d, M, Q + KC, D, T,
                      nullptr));
  };
  auto cublas_rotary = [&] {
    cublas_gemm();
    rotary_after(whole_ref);
  };
  auto own_plain = [&] { CK(k::hopper_linear(A, B, K, C_own, M, N, K, nullptr)); };
  auto own_plain_rotary = [&] {
    own_plain();
    rotary_after(whole_own);
  };
  const k::qkv_outputs outs{q, kk, v, {Q, KC, V}};
  const k::rotary_tables tables{cos_d, sin_d, T, D};
  auto own_rotary = [&] { CK(k::hopper_linear_rotary(A, B, K, outs, tables, M, K, nullptr)); };

  // The fused kernel against the plain GEMM's bits turned by the rotary kernel.
  own_plain_rotary();
  CK(cudaMemset(q, 0xff, (size_t)M * Q * 2));
  CK(cudaMemset(kk, 0xff, (size_t)M * KC * 2));
  CK(cudaMemset(v, 0xff, (size_t)M * V * 2));
  own_rotary();
  CK(cudaDeviceSynchronize());
  const auto turned = host_copy(R_ref, (size_t)M * N);  // q, then k, then v, each in one block
  std::vector<__nv_bfloat16> q_ref(turned.begin(), turned.begin() + M * Q),
      k_ref(turned.begin() + M * Q, turned.begin() + M * (Q + KC)),
      v_ref(turned.begin() + M * (Q + KC), turned.end());
  bool ok =
      same_bits(q_ref, Q, 0, q, M, Q, "own GEMM with rotary: q against the plain GEMM and the rotary kernel");
  ok = same_bits(k_ref, KC, 0, kk, M, KC, "own GEMM with rotary: k against the same") && ok;
  ok = same_bits(v_ref, V, 0, v, M, V, "own GEMM with rotary: v against the same") && ok;
  cublas_gemm();
  CK(cudaDeviceSynchronize());
  {
    const auto r = host_copy(C_ref, (size_t)M * N), o = host_copy(C_own, (size_t)M * N);
    double worst = 0;
    for (size_t i = 0; i < r.size(); ++i) worst = std::max(worst, (double)std::fabs(bf(r[i]) - bf(o[i])));
    printf("own plain GEMM against cuBLAS: max |diff| %.4g\n", worst);
    ok = ok && worst <= 0.05;
  }
  if (!ok) return 1;

  stretch_timer stretch;
  std::vector<double> t_gemm, t_ref, t_plain, t_plain_rot, t_fused;
  for (int s = 0; s < 12; ++s) {
    const double a = stretch(cublas_gemm), b = stretch(cublas_rotary), c = stretch(own_plain),
                 d = stretch(own_plain_rotary), e = stretch(own_rotary);
    if (s >= 4)
      t_gemm.push_back(a), t_ref.push_back(b), t_plain.push_back(c), t_plain_rot.push_back(d),
          t_fused.push_back(e);
  }
  printf("%ld x (%ld + %ld + %ld) x %ld, heads of %ld, %ld positions\n", M, Q, KC, V, K, D, T);
  printf("cuBLAS GEMM alone:              %8.1f us\n", median_of(t_gemm));
  printf("cuBLAS GEMM + rotary kernel:    %8.1f us\n", median_of(t_ref));
  printf("own GEMM alone:                 %8.1f us\n", median_of(t_plain));
  printf("own GEMM + rotary kernel:       %8.1f us\n", median_of(t_plain_rot));
  printf("own GEMM, rotary inside:        %8.1f us  (%.3fx cuBLAS + rotary)\n", median_of(t_fused),
         median_of(t_ref) / median_of(t_fused));
  return 0;
}

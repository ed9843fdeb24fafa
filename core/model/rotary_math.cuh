// Rotary embedding's table reads and its arithmetic on one pair (lo, hi = lo + head_dim / 2), one
// formula for every kernel that computes it (fused_kernels.cu's rotary_half, hopper_gemm.cu's
// epilogue), so that q and k are the same bits whichever computed them: each product rounded, then
// one add, with no multiply-add left for the compiler to contract one way here and another there.
//   forward:  y_lo = x_lo c_lo - x_hi s_lo,   y_hi = x_hi c_hi + x_lo s_hi
//   backward: y_lo = g_lo c_lo + g_hi s_hi,   y_hi = g_hi c_hi - g_lo s_lo
#pragma once

namespace cohort::core::model::kernels {

// Vec fp32 table entries from p (16-byte loads where Vec is a multiple of 4: p is then 16-byte
// aligned), through the read-only cache: a position's cos/sin row is read by every head of it.
template <int Vec>
__device__ __forceinline__ void load_table(const float* __restrict__ p, float (&out)[Vec]) {
  if constexpr (Vec % 4 == 0) {
#pragma unroll
    for (int k = 0; k < Vec; k += 4) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(p + k));
      out[k] = v.x;
      out[k + 1] = v.y;
      out[k + 2] = v.z;
      out[k + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < Vec; ++k) out[k] = __ldg(p + k);
  }
}

__device__ __forceinline__ void rotary_forward_pair(float lo, float hi, float c_lo, float c_hi, float s_lo,
                                                    float s_hi, float& y_lo, float& y_hi) {
  y_lo = __fsub_rn(__fmul_rn(lo, c_lo), __fmul_rn(hi, s_lo));
  y_hi = __fadd_rn(__fmul_rn(hi, c_hi), __fmul_rn(lo, s_hi));
}

__device__ __forceinline__ void rotary_backward_pair(float lo, float hi, float c_lo, float c_hi, float s_lo,
                                                     float s_hi, float& y_lo, float& y_hi) {
  y_lo = __fadd_rn(__fmul_rn(lo, c_lo), __fmul_rn(hi, s_hi));
  y_hi = __fsub_rn(__fmul_rn(hi, c_hi), __fmul_rn(lo, s_lo));
}

}  // namespace cohort::core::model::kernels

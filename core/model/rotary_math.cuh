// Rotary embedding's arithmetic on one pair (lo, hi = lo + head_dim / 2), one formula for every
// kernel that computes it (fused_kernels.cu's rotary_half, hopper_gemm.cu's epilogue), so that q
// and k are the same bits whichever computed them: each product rounded, then one add, with no
// multiply-add left for the compiler to contract one way here and another there.
//   forward:  y_lo = x_lo c_lo - x_hi s_lo,   y_hi = x_hi c_hi + x_lo s_hi
//   backward: y_lo = g_lo c_lo + g_hi s_hi,   y_hi = g_hi c_hi - g_lo s_lo
#pragma once

namespace cohort::core::model::kernels {

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

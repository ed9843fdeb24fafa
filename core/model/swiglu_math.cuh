// SwiGLU's sigmoid, one formula for every kernel that computes it (fused_kernels.cu's forward and
// backward, hopper_gemm.cu's epilogue), so that h is the same bits whichever computed it: the
// hardware's approximate exponential and reciprocal. 1 + e^-x >= 1 has no denormal; below x of
// about -88 the exponential is infinite and its reciprocal 0.
#pragma once

namespace cohort::core::model::kernels {

__device__ __forceinline__ float swiglu_sigmoid(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + __expf(-x)));
  return r;
}

}  // namespace cohort::core::model::kernels

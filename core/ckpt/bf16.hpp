// fp32 -> bf16 conversion as torch rounds (round to nearest, ties to even), for exports that
// write bf16 weights without torch. A NaN stays a (quiet) NaN of the same sign. And the exact
// widenings bf16 -> fp32 and fp16 -> fp32, for exports that read a base model's weights.
#pragma once

#include <cstdint>
#include <cstring>

namespace cohort::core::ckpt {

inline std::uint16_t bf16_from_f32(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  const std::uint32_t rounding_bias = ((bits >> 16) & 1u) + 0x7fffu;
  return static_cast<std::uint16_t>((bits + rounding_bias) >> 16);
}

inline float f32_from_bf16(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline float f32_from_f16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits = 0;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // infinity, NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // ±0
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace cohort::core::ckpt

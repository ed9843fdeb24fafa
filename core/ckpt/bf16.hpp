// fp32 -> bf16 conversion as torch rounds (round to nearest, ties to even), for exports that
// write bf16 weights without torch. A NaN stays a (quiet) NaN of the same sign.
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

}  // namespace cohort::core::ckpt

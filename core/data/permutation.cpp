// A seeded bijection of [0, n), O(1) per index (see permutation.hpp).
#include "core/data/permutation.hpp"

#include <stdexcept>

namespace cohort::core::data {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

feistel_permutation::feistel_permutation(std::uint64_t n, std::uint64_t key) : n_(n) {
  // The Feistel domain is 2^(2*half_bits) >= n, with fewer than 4n elements, so cycle walking
  // takes fewer than 4 rounds on average.
  int bits = 0;
  while (bits < 62 && (std::uint64_t{1} << bits) < n) ++bits;
  half_bits_ = (bits + 1) / 2;
  if (half_bits_ == 0) half_bits_ = 1;
  half_mask_ = (std::uint64_t{1} << half_bits_) - 1;
  std::uint64_t k = splitmix64(key ^ 0x636F686F72740000ULL);
  for (auto& rk : round_keys_) {
    k = splitmix64(k);
    rk = k;
  }
}

std::uint64_t feistel_permutation::encrypt(std::uint64_t x) const {
  std::uint64_t left = x >> half_bits_;
  std::uint64_t right = x & half_mask_;
  for (std::uint64_t rk : round_keys_) {
    const std::uint64_t f = splitmix64(right ^ rk) & half_mask_;
    const std::uint64_t next = left ^ f;
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

std::uint64_t feistel_permutation::operator()(std::uint64_t i) const {
  if (i >= n_) throw std::out_of_range("feistel_permutation: index out of range");
  std::uint64_t x = encrypt(i);
  while (x >= n_) x = encrypt(x);
  return x;
}

}  // namespace cohort::core::data

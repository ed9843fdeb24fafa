// A seeded bijection of [0, n) evaluated in O(1) per index (a keyed Feistel network with cycle
// walking), so epoch permutations of 100M+ samples need no memory. Pure; safe from any thread.
#pragma once

#include <cstdint>

namespace cohort::core::data {

std::uint64_t splitmix64(std::uint64_t x);

class feistel_permutation {
 public:
  feistel_permutation(std::uint64_t n, std::uint64_t key);
  std::uint64_t size() const { return n_; }
  // The image of i (i < size()); every value in [0, n) is the image of exactly one i.
  std::uint64_t operator()(std::uint64_t i) const;

 private:
  std::uint64_t encrypt(std::uint64_t x) const;
  std::uint64_t n_;
  int half_bits_ = 0;
  std::uint64_t half_mask_ = 0;
  std::uint64_t round_keys_[6];
};

}  // namespace cohort::core::data

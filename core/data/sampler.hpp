// The deterministic distributed sampler: which samples make global step k, and each rank's and
// micro-batch's part of them, from (seed, k, global batch) alone, in O(1) per sample. Immutable.
#pragma once

#include <cstdint>
#include <vector>

#include "core/data/permutation.hpp"

namespace cohort::core::data {

struct batch_geometry {
  std::int64_t world_size = 1;
  std::int64_t micro_batch = 1;  // samples per rank per forward/backward
  std::int64_t grad_accum = 1;   // micro-batches per rank per step
  std::int64_t global_batch() const { return world_size * micro_batch * grad_accum; }
  std::int64_t per_rank() const { return micro_batch * grad_accum; }
};

// Throws data_error unless every field is positive.
void validate(const batch_geometry& g);

// Global step k reads slots [s*G, (s+1)*G) of epoch e's seeded permutation (e = k / steps_per_epoch,
// s = k % steps_per_epoch, G = global batch), so it never depends on the world size. Rank r takes
// slots [r*B*A, (r+1)*B*A) of that slice; its micro-batch m is the m-th run of B slots. The last
// partial global batch of each epoch is dropped.
class sampler {
 public:
  // Throws data_error when global_batch < 1 or num_samples < global_batch (no full step).
  sampler(std::int64_t num_samples, std::int64_t global_batch, std::uint64_t seed);

  std::int64_t num_samples() const { return num_samples_; }
  std::int64_t global_batch() const { return global_batch_; }
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  std::int64_t dropped_per_epoch() const { return num_samples_ - steps_per_epoch_ * global_batch_; }

  // The sample in slot `slot` (0 <= slot < global_batch) of global step `step` (>= 0).
  std::int64_t sample_at(std::int64_t step, std::int64_t slot) const;
  // All global_batch samples of a step, in slot order.
  std::vector<std::int64_t> step_samples(std::int64_t step) const;
  // Rank r's part of a step, in the order the rank consumes it (micro-batch 0 first).
  std::vector<std::int64_t> rank_samples(std::int64_t step, const batch_geometry& g, std::int64_t rank) const;
  // Micro-batch m of rank r at a step.
  std::vector<std::int64_t> micro_batch_samples(std::int64_t step, const batch_geometry& g, std::int64_t rank,
                                                std::int64_t micro) const;

 private:
  feistel_permutation epoch_permutation(std::int64_t epoch) const;
  void check_geometry(const batch_geometry& g, std::int64_t rank) const;

  std::int64_t num_samples_;
  std::int64_t global_batch_;
  std::uint64_t seed_;
  std::int64_t steps_per_epoch_;
};

}  // namespace cohort::core::data

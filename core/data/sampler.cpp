// The deterministic distributed sampler (see sampler.hpp).
#include "core/data/sampler.hpp"

#include <string>

#include "core/data/format.hpp"

namespace cohort::core::data {

void validate(const batch_geometry& g) {
  if (g.world_size < 1) throw data_error("world_size must be >= 1, got " + std::to_string(g.world_size));
  if (g.micro_batch < 1) throw data_error("micro_batch must be >= 1, got " + std::to_string(g.micro_batch));
  if (g.grad_accum < 1) throw data_error("grad_accum must be >= 1, got " + std::to_string(g.grad_accum));
}

sampler::sampler(std::int64_t num_samples, std::int64_t global_batch, std::uint64_t seed)
    : num_samples_(num_samples), global_batch_(global_batch), seed_(seed) {
  if (global_batch < 1) throw data_error("global batch must be >= 1, got " + std::to_string(global_batch));
  if (num_samples < global_batch)
    throw data_error("the dataset has " + std::to_string(num_samples) + " samples, fewer than one global batch of " +
                     std::to_string(global_batch) + "; lower micro_batch, grad_accum or world_size");
  steps_per_epoch_ = num_samples / global_batch;
}

feistel_permutation sampler::epoch_permutation(std::int64_t epoch) const {
  const std::uint64_t key = splitmix64(seed_ ^ splitmix64(static_cast<std::uint64_t>(epoch) + 0x65706F6368ULL));
  return feistel_permutation(static_cast<std::uint64_t>(num_samples_), key);
}

std::int64_t sampler::sample_at(std::int64_t step, std::int64_t slot) const {
  if (step < 0) throw data_error("step must be >= 0, got " + std::to_string(step));
  if (slot < 0 || slot >= global_batch_)
    throw data_error("slot " + std::to_string(slot) + " outside the global batch of " + std::to_string(global_batch_));
  const std::int64_t epoch = step / steps_per_epoch_;
  const std::int64_t position = (step % steps_per_epoch_) * global_batch_ + slot;
  return static_cast<std::int64_t>(epoch_permutation(epoch)(static_cast<std::uint64_t>(position)));
}

std::vector<std::int64_t> sampler::step_samples(std::int64_t step) const {
  if (step < 0) throw data_error("step must be >= 0, got " + std::to_string(step));
  const auto perm = epoch_permutation(step / steps_per_epoch_);
  const std::int64_t base = (step % steps_per_epoch_) * global_batch_;
  std::vector<std::int64_t> out(static_cast<std::size_t>(global_batch_));
  for (std::int64_t s = 0; s < global_batch_; ++s)
    out[static_cast<std::size_t>(s)] = static_cast<std::int64_t>(perm(static_cast<std::uint64_t>(base + s)));
  return out;
}

void sampler::check_geometry(const batch_geometry& g, std::int64_t rank) const {
  validate(g);
  if (g.global_batch() != global_batch_)
    throw data_error("world_size x micro_batch x grad_accum = " + std::to_string(g.global_batch()) +
                     " differs from the sampler's global batch " + std::to_string(global_batch_));
  if (rank < 0 || rank >= g.world_size)
    throw data_error("rank " + std::to_string(rank) + " outside [0, " + std::to_string(g.world_size) + ")");
}

std::vector<std::int64_t> sampler::rank_samples(std::int64_t step, const batch_geometry& g, std::int64_t rank) const {
  check_geometry(g, rank);
  if (step < 0) throw data_error("step must be >= 0, got " + std::to_string(step));
  const auto perm = epoch_permutation(step / steps_per_epoch_);
  const std::int64_t base = (step % steps_per_epoch_) * global_batch_ + rank * g.per_rank();
  std::vector<std::int64_t> out(static_cast<std::size_t>(g.per_rank()));
  for (std::int64_t s = 0; s < g.per_rank(); ++s)
    out[static_cast<std::size_t>(s)] = static_cast<std::int64_t>(perm(static_cast<std::uint64_t>(base + s)));
  return out;
}

std::vector<std::int64_t> sampler::micro_batch_samples(std::int64_t step, const batch_geometry& g, std::int64_t rank,
                                                       std::int64_t micro) const {
  check_geometry(g, rank);
  if (micro < 0 || micro >= g.grad_accum)
    throw data_error("micro-batch " + std::to_string(micro) + " outside [0, " + std::to_string(g.grad_accum) + ")");
  if (step < 0) throw data_error("step must be >= 0, got " + std::to_string(step));
  const auto perm = epoch_permutation(step / steps_per_epoch_);
  const std::int64_t base = (step % steps_per_epoch_) * global_batch_ + rank * g.per_rank() + micro * g.micro_batch;
  std::vector<std::int64_t> out(static_cast<std::size_t>(g.micro_batch));
  for (std::int64_t s = 0; s < g.micro_batch; ++s)
    out[static_cast<std::size_t>(s)] = static_cast<std::int64_t>(perm(static_cast<std::uint64_t>(base + s)));
  return out;
}

}  // namespace cohort::core::data

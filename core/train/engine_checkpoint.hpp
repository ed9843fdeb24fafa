// The ZeRO state of the engine as checkpoint tensors, and back on any world size. Logical tensors:
// param/<hf name> (fp32 master weights), exp_avg/<hf name> and exp_avg_sq/<hf name> (AdamW
// moments), each with the parameter's full shape. Per unit, a rank stores one tensor per kind
// (unit-<u>/<kind>) holding the elements it keeps; with stage 0 (replicated) only rank 0 stores.
// Export (core/ckpt/hf_export) reads the param/ tensors.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/ckpt/async_writer.hpp"
#include "core/ckpt/manifest.hpp"
#include "core/ckpt/reshard.hpp"
#include "core/train/zero_optimizer.hpp"

namespace cohort::core::train {

// What this rank keeps, as checkpoint tensors that read the optimizer's state where it lies: host
// state in place, device state a chunk at a time (ckpt::write_options), so a save holds no second
// copy of the shard. Valid until the optimizer's next step.
std::vector<ckpt::shard_tensor> shard_tensors(zero_optimizer& optimizer, int rank);

// Fills this rank's master weights and moments from a checkpoint of any world size (missing
// moments: zeros). Throws std::invalid_argument naming the checkpoint and the first parameter
// it lacks or holds with another shape.
void load_shards(zero_optimizer& optimizer, ckpt::reshard_reader& reader);

// Serialises seeding and restoring torch's global generators: ranks that share a process
// (threads) share them. Every engine takes it around manual_seed and set_state.
std::mutex& generator_mutex();

// Where an engine's step stands, as its checkpoints record it (ckpt::rank_state): the step, the LR
// schedule's (step, total_steps), the sampler's (step, seed, global_batch), torch's CPU generator
// and, on a GPU, the device's (extra.cuda_rng), and the AdamW step (extra.adam_step).
struct engine_position {
  std::int64_t steps_done = 0;
  std::int64_t total_steps = 0;
  std::int64_t sampler_step = 0;
  std::uint64_t seed = 0;
  std::int64_t global_batch = 0;
};
ckpt::rank_state rank_state_of(zero_optimizer& optimizer, const engine_position& at, const torch::Device& device);

// Continues from committed checkpoint `dir` (manifest `m`) written by any world size with the same
// global batch: master weights and moments (load_shards), the AdamW step, and (same world size)
// the generators; then the model's weights follow (refresh_weights, a collective). Returns the
// step the checkpoint is of, which is also its sampler position. Throws std::invalid_argument
// naming the checkpoint and what does not match.
std::int64_t restore_engine_state(const std::string& dir, const ckpt::manifest& m, zero_optimizer& optimizer,
                                  int rank, int world_size, std::int64_t global_batch, const torch::Device& device);

}  // namespace cohort::core::train

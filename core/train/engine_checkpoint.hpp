// The ZeRO state of the engine as checkpoint tensors, and back on any world size. Logical tensors:
// param/<hf name> (fp32 master weights), exp_avg/<hf name> and exp_avg_sq/<hf name> (AdamW
// moments), each with the parameter's full shape. Per unit, a rank stores one tensor per kind
// (unit-<u>/<kind>) holding the elements it keeps; with stage 0 (replicated) only rank 0 stores.
// Export (core/ckpt/hf_export) reads the param/ tensors.
#pragma once

#include <vector>

#include "core/ckpt/async_writer.hpp"
#include "core/ckpt/reshard.hpp"
#include "core/train/zero_optimizer.hpp"

namespace cohort::core::train {

// Host copies (the only device-to-host copy of a checkpoint) of what this rank keeps.
std::vector<ckpt::owned_shard_tensor> shard_tensors(zero_optimizer& optimizer, int rank);

// Fills this rank's master weights and moments from a checkpoint of any world size (missing
// moments: zeros). Throws std::invalid_argument naming the checkpoint and the first parameter
// it lacks or holds with another shape.
void load_shards(zero_optimizer& optimizer, ckpt::reshard_reader& reader);

}  // namespace cohort::core::train

// What a job needs per rank: device and host bytes for weights, gradients, fp32 master weights
// and AdamW moments at the job's ZeRO stage, precision and offload, plus activations (the usual
// per-layer estimate, or its checkpointed form) and rank 0's extra host RAM to consolidate the
// full model for export. `submit plan` prints it and warns when a node's memory will not hold it.
// No torch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/job_spec.hpp"

namespace cohort::core::train {

// The sizes of the model that matter for memory.
struct model_shape {
  std::int64_t parameters = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t vocab_size = 0;
};

struct rank_memory {
  double weights = 0;      // the compute copy (bf16 or fp32); stage 3 holds a shard
  double gradients = 0;
  double master = 0;       // fp32 master weights beyond the compute copy
  double optimizer = 0;    // AdamW moments
  double activations = 0;  // one micro-batch
  double device_bytes = 0; // on the GPU (0 for CPU jobs)
  double host_bytes = 0;   // in host RAM
};

struct memory_estimate {
  model_shape model;
  rank_memory per_rank;                 // every rank the same
  double rank0_consolidation_bytes = 0; // extra host RAM on rank 0's node (full fp32 model)
};

// The model's shape from the spec's model section (hf_dir's config.json, a config file or the
// inline config). Throws what reading the config throws.
model_shape read_model_shape(const config::model_spec& model);

memory_estimate estimate_memory(const config::job_spec& spec, const model_shape& model);

}  // namespace cohort::core::train

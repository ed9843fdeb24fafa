// What the training engines (causal_lm_engine, seq2seq_engine) share in setting up a rank: its
// compute device, the compute dtype of train.precision, and the tokenizer files an export carries.
#pragma once

#include <string>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "config/job_spec.hpp"
#include "core/data/format.hpp"

namespace cohort::core::train {

// The CUDA device of `rank` with scaling.use_gpu (causal_lm_engine::cuda_device_for), else the
// CPU. Throws std::invalid_argument naming scaling.use_gpu when no CUDA device is visible.
torch::Device compute_device(const config::job_spec& spec, int rank);

// fp32 or bf16.
torch::ScalarType dtype_of(config::precision p);

// The tokenizer files an export of this job's model should carry (a JSON list of paths): those of
// the fine-tuned Hugging Face directory, else the one the data set was built with and its HF
// companions.
nlohmann::json tokenizer_files(const config::job_spec& spec, const data::manifest& data);

}  // namespace cohort::core::train

// Loading a decoder from, and saving it to, a Hugging Face model directory: config.json plus
// model.safetensors or shards listed in model.safetensors.index.json (F32, F16, BF16).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <torch/types.h>

#include "core/model/decoder.hpp"

namespace cohort::core::model {

struct load_options {
  std::optional<torch::ScalarType> dtype;  // nullopt: the dtype config.json names
  torch::Device device = torch::kCPU;
};

// Builds the model config.json describes and fills every weight from the safetensors files.
// The model comes back in eval mode (no dropout), as from_pretrained returns it.
// Throws model_error naming the file and tensor for a missing, malformed or misshapen tensor.
decoder load_hf_model(const std::string& dir, const load_options& options = {});

// Copies DIR's weights into `model` (whose config must match DIR's), converting dtypes.
void load_hf_weights(decoder_impl& model, const std::string& dir);

struct save_options {
  std::uint64_t max_shard_bytes = 5'000'000'000;  // above this, write shards and an index
  std::optional<torch::ScalarType> dtype;         // nullopt: the model's dtype
  std::string copy_files_from;                    // a directory whose tokenizer files to copy
};

// Writes config.json, the weights (with __metadata__ {"format": "pt"}) and, where given, the
// tokenizer and generation files, so that transformers' from_pretrained loads DIR unchanged.
void save_hf_model(const decoder_impl& model, const std::string& dir,
                   const save_options& options = {});

torch::ScalarType dtype_from_name(const std::string& name);  // "float32" / "F32" -> kFloat, ...

}  // namespace cohort::core::model

// Loading a decoder from, and saving it to, a Hugging Face model directory: config.json plus
// model.safetensors or shards listed in model.safetensors.index.json (F32, F16, BF16).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "core/model/decoder.hpp"
#include "core/model/hf_files.hpp"
#include "core/model/safetensors.hpp"

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
// The same for any model's weights `params` (open_hf_weight_files' checks; `model` names what
// expects them in errors).
void load_hf_weights(const std::vector<hf_parameter>& params, const std::string& dir,
                     const std::string& model);

// Where one expected weight lives in a directory's safetensors files.
struct hf_tensor_file {
  const safetensors_reader* reader = nullptr;  // owned by the hf_weight_files
  const tensor_entry* entry = nullptr;         // owned by *reader
  torch::ScalarType dtype = torch::kFloat;     // of the stored values: kFloat, kHalf or kBFloat16
};

// A directory's safetensors files, open and checked against the weights a model expects.
struct hf_weight_files {
  std::vector<std::unique_ptr<safetensors_reader>> readers;  // one per file
  std::vector<hf_tensor_file> tensors;                       // tensors[i] holds expected[i]
};

// Opens DIR's model.safetensors, or the shards model.safetensors.index.json lists, and finds every
// expected weight (under its name, or without the base model's "model."/"transformer." prefix):
// shapes equal, dtypes F32/F16/BF16. Extra tensors that transformers ignores on load (rotary
// inv_freq, GPT-2's attn.bias buffers, a redundant lm_head.weight when `expected` has none, i.e.
// tied embeddings) are accepted; any other extra tensor is refused. Throws model_error
// (bad_weights, bad_safetensors, io) naming the file and tensor; `model` names what expects the
// weights in those messages ("a llama model with this config.json").
// `dir` may be in S3 (hf_files.hpp): then each file's header is fetched by range, and nothing else.
hf_weight_files open_hf_weight_files(const hf_files& dir, const std::vector<hf_parameter>& expected,
                                     const std::string& model);
hf_weight_files open_hf_weight_files(const std::string& dir,  // a local directory
                                     const std::vector<hf_parameter>& expected, const std::string& model);

// Whether DIR's weights (the index's weight_map, else model.safetensors) hold a tensor named
// `name`, exactly (a sequence classifier's "score.weight"). Throws as open_hf_weight_files for
// a bad index; false without weight files.
bool hf_has_tensor(const hf_files& dir, const std::string& name);

struct save_options {
  std::uint64_t max_shard_bytes = 5'000'000'000;  // above this, write shards and an index
  std::optional<torch::ScalarType> dtype;         // nullopt: the model's dtype
  std::string copy_files_from;                    // a directory whose tokenizer files to copy
};

// Writes config.json, the weights (with __metadata__ {"format": "pt"}) and, where given, the
// tokenizer and generation files, so that transformers' from_pretrained loads DIR unchanged.
void save_hf_model(const decoder_impl& model, const std::string& dir,
                   const save_options& options = {});

// save_hf_model for any model: the dtype it writes (options.dtype, else the first weight's), its
// name in config.json ("float32", "float16", "bfloat16"), and the directory written from the
// config.json object and the weights under their Hugging Face names.
torch::ScalarType save_dtype(const std::vector<hf_parameter>& params, const save_options& options);
const char* config_dtype_name(torch::ScalarType dtype);
void save_hf_files(const std::vector<hf_parameter>& params, const nlohmann::json& config,
                   torch::ScalarType dtype, const std::string& dir, const save_options& options);

torch::ScalarType dtype_from_name(const std::string& name);  // "float32" / "F32" -> kFloat, ...

}  // namespace cohort::core::model

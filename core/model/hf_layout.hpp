// The weight files of a Hugging Face model directory as transformers writes them: one
// model.safetensors, or model-0000i-of-0000n.safetensors shards listed by
// model.safetensors.index.json. Naming, shard planning, stale-file cleanup and which weights are
// the vocabulary's; no torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cohort::core::model {

inline constexpr const char* hf_weights_name = "model.safetensors";
inline constexpr const char* hf_index_name = "model.safetensors.index.json";

// Splits tensors of the given byte sizes, in order, into shards that stay within max_shard_bytes
// (a tensor above the limit gets a shard of its own). Returns each shard's tensor indices; no
// tensors give one empty shard.
std::vector<std::vector<std::size_t>> plan_hf_shards(const std::vector<std::uint64_t>& nbytes,
                                                     std::uint64_t max_shard_bytes);
// "model.safetensors" when num_shards is 1, else "model-00002-of-00005.safetensors" (index 0-based).
std::string hf_weights_file_name(std::size_t index, std::size_t num_shards);
// True for model.safetensors, the index and any model-*-of-*.safetensors.
bool is_hf_weights_file_name(const std::string& name);
// Removes every weights file of DIR, so a stale shard cannot confuse a loader. Throws
// model_error (io) naming the file.
void remove_hf_weights(const std::string& dir);
// Whether a weight's rows are token ids (its first dimension is the vocabulary), by its Hugging
// Face name: the token embedding (transformer.wte, model.embed_tokens, model.decoder.embed_tokens,
// T5's shared), lm_head.weight and lm_head.bias. Vocabulary growth (vocab_resize.hpp) gives
// these new rows.
bool is_vocab_parameter(const std::string& name);
// The index's content: {"metadata": {"total_size": N}, "weight_map": {tensor: file}}.
nlohmann::json hf_weights_index(std::uint64_t total_size,
                                const std::map<std::string, std::string>& weight_map);

}  // namespace cohort::core::model

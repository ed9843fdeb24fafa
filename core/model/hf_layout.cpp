// Hugging Face weight file naming, shard planning and cleanup.
#include "core/model/hf_layout.hpp"

#include <cstdio>
#include <filesystem>

#include "core/model/model_error.hpp"

namespace cohort::core::model {

std::vector<std::vector<std::size_t>> plan_hf_shards(const std::vector<std::uint64_t>& nbytes,
                                                     std::uint64_t max_shard_bytes) {
  std::vector<std::vector<std::size_t>> shards(1);
  std::uint64_t shard_bytes = 0;
  for (std::size_t i = 0; i < nbytes.size(); ++i) {
    if (!shards.back().empty() && shard_bytes + nbytes[i] > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += nbytes[i];
  }
  return shards;
}

std::string hf_weights_file_name(std::size_t index, std::size_t num_shards) {
  if (num_shards == 1) return hf_weights_name;
  char file[64];
  std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", index + 1, num_shards);
  return file;
}

bool is_hf_weights_file_name(const std::string& n) {
  const std::string ext = ".safetensors";
  const bool shard = n.rfind("model-", 0) == 0 && n.find("-of-") != std::string::npos &&
                     n.size() > ext.size() && n.compare(n.size() - ext.size(), ext.size(), ext) == 0;
  return n == hf_weights_name || n == hf_index_name || shard;
}

void remove_hf_weights(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> stale;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (is_hf_weights_file_name(it->path().filename().string())) stale.push_back(it->path());
  }
  if (ec) throw model_error(model_errc::io, dir + ": cannot list: " + ec.message());
  for (const auto& path : stale) {
    fs::remove(path, ec);
    if (ec) throw model_error(model_errc::io, path.string() + ": cannot remove stale weights: " + ec.message());
  }
}

nlohmann::json hf_weights_index(std::uint64_t total_size,
                                const std::map<std::string, std::string>& weight_map) {
  return {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
}

bool is_vocab_parameter(const std::string& name) {
  for (const char* n : {"transformer.wte.weight", "model.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                        "shared.weight", "lm_head.weight", "lm_head.bias"})
    if (name == n) return true;
  return false;
}

}  // namespace cohort::core::model

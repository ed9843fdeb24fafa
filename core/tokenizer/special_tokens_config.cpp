// The bos / eos / pad token strings kept next to a tokenizer file (see special_tokens_config.hpp).
#include "core/tokenizer/special_tokens_config.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "core/tokenizer/file_digest.hpp"
#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {
namespace {

std::optional<std::string> token_field(const nlohmann::json& config, const char* field, const std::string& file) {
  const auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  throw tokenizer_error(file + ": \"" + field + "\" must be a string, {\"content\": \"...\"} or null, got " +
                        it->dump());
}

}  // namespace

special_token_names read_special_token_names(const std::string& tokenizer_path) {
  special_token_names names;
  const auto dir = std::filesystem::path(tokenizer_path).parent_path();
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const auto path = (dir.empty() ? std::filesystem::path(name) : dir / name).string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) continue;
    names.found_config = true;
    names.source += (names.source.empty() ? "" : ", ") + path;
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(read_file(path));
    } catch (const nlohmann::json::exception& e) {
      throw tokenizer_error(path + ": not valid JSON: " + e.what());
    }
    if (!config.is_object()) throw tokenizer_error(path + ": expected a JSON object");
    if (!names.bos) names.bos = token_field(config, "bos_token", path);
    if (!names.eos) names.eos = token_field(config, "eos_token", path);
    if (!names.pad) names.pad = token_field(config, "pad_token", path);
  }
  return names;
}

}  // namespace cohort::core::tokenizer

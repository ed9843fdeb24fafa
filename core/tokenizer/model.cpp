// The tokenizer.json model step by type, and the byte_fallback tokens (see model.hpp).
#include "core/tokenizer/model.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>

#include "core/tokenizer/bpe_model.hpp"
#include "core/tokenizer/json_fields.hpp"
#include "core/tokenizer/unigram_model.hpp"

namespace cohort::core::tokenizer {

std::unique_ptr<model> make_model(const nlohmann::json& spec, const std::string& where) {
  const std::string type = spec.contains("type") ? required_string(spec, "type", where + " model") : "BPE";
  if (type == "BPE") return std::make_unique<bpe_model>(spec, where);
  if (type == "Unigram") return std::make_unique<unigram_model>(spec, where);
  throw tokenizer_error(where + ": model type \"" + type + "\" is not supported (supported: BPE, Unigram)");
}

std::array<token_id, 256> byte_fallback_ids(const model& m) {
  std::array<token_id, 256> ids{};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    ids[static_cast<std::size_t>(b)] = m.token_to_id(name).value_or(-1);
  }
  return ids;
}

}  // namespace cohort::core::tokenizer

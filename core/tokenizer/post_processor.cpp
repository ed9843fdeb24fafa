// The special tokens a tokenizer.json's post-processor puts around one sequence (see post_processor.hpp).
#include "core/tokenizer/post_processor.hpp"

#include <nlohmann/json.hpp>

#include "core/tokenizer/json_fields.hpp"

namespace cohort::core::tokenizer {
namespace {

using nlohmann::json;

token_id id_of(const json& v, const std::string& where) {
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > INT32_MAX)
    throw tokenizer_error(where + ": expected a non-negative token id");
  return static_cast<token_id>(v.get<std::uint64_t>());
}

// BertProcessing / RobertaProcessing "cls" or "sep": ["[CLS]", 101].
token_id pair_id(const json& spec, const char* field, const std::string& where) {
  const auto& pair = required_array(spec, field, where);
  if (pair.size() != 2) throw tokenizer_error(where + ": \"" + field + "\" must be [token, id]");
  return id_of(pair[1], where + " " + field + "[1]");
}

}  // namespace

post_processor::post_processor(const json& spec, const std::string& where) {
  if (spec.is_null()) return;
  const std::string here = where + " post_processor";
  const std::string type = required_string(spec, "type", here);
  if (type == "ByteLevel") return;
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    before_ = {pair_id(spec, "cls", here)};
    after_ = {pair_id(spec, "sep", here)};
    return;
  }
  if (type == "Sequence") {
    const auto& list = required_array(spec, "processors", here);
    for (std::size_t i = 0; i < list.size(); ++i) {
      const post_processor inner(list[i], here + " processors[" + std::to_string(i) + "]");
      if (!inner.unsupported_.empty()) unsupported_ = inner.unsupported_;
      before_.insert(before_.begin(), inner.before_.begin(), inner.before_.end());
      after_.insert(after_.end(), inner.after_.begin(), inner.after_.end());
    }
    return;
  }
  if (type != "TemplateProcessing") {
    unsupported_ = here + ": type \"" + type +
                   "\" is not supported (supported: TemplateProcessing, BertProcessing, RobertaProcessing, "
                   "ByteLevel, Sequence)";
    return;
  }
  const auto& single = required_array(spec, "single", here);
  const auto& specials = required_object(spec, "special_tokens", here);
  bool seen_sequence = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const std::string item = here + " single[" + std::to_string(i) + "]";
    if (single[i].contains("Sequence")) {
      if (seen_sequence) throw tokenizer_error(item + ": a single-sequence template holds one Sequence");
      seen_sequence = true;
      continue;
    }
    const auto& token = required_object(single[i], "SpecialToken", item);
    const std::string name = required_string(token, "id", item + " SpecialToken");
    const auto it = specials.find(name);
    if (it == specials.end())
      throw tokenizer_error(item + ": special token \"" + name + "\" is not in \"special_tokens\"");
    const auto& ids = required_array(*it, "ids", here + " special_tokens." + name);
    auto& side = seen_sequence ? after_ : before_;
    for (const auto& v : ids) side.push_back(id_of(v, here + " special_tokens." + name + " ids"));
  }
  if (!seen_sequence) throw tokenizer_error(here + " single: the template has no {\"Sequence\": ...} item");
}

std::vector<token_id> post_processor::apply(const std::vector<token_id>& ids) const {
  if (!unsupported_.empty()) throw tokenizer_error(unsupported_);
  std::vector<token_id> out;
  out.reserve(before_.size() + ids.size() + after_.size());
  out.insert(out.end(), before_.begin(), before_.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), after_.begin(), after_.end());
  return out;
}

}  // namespace cohort::core::tokenizer

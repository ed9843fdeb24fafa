// Hugging Face tokenizer.json post-processors for one sequence (see post_processor.hpp).
#include "core/tokenizer/post_processor.hpp"

#include <nlohmann/json.hpp>

#include "core/tokenizer/json_fields.hpp"

namespace cohort::core::tokenizer {
namespace {

token_id checked_id(const nlohmann::json& id, token_id max_id, const std::string& where) {
  if (!id.is_number_unsigned() || id.get<std::uint64_t>() > static_cast<std::uint64_t>(max_id)) {
    throw tokenizer_error(where + ": id " + id.dump() + " is not a token id of this tokenizer (0.." +
                          std::to_string(max_id) + ")");
  }
  return id.get<token_id>();
}

// BertProcessing / RobertaProcessing's "cls" and "sep": ["[CLS]", 101].
token_id pair_token(const nlohmann::json& spec, const char* field, const std::string& where, token_id max_id) {
  const auto& v = required_array(spec, field, where);
  if (v.size() != 2 || !v[0].is_string()) {
    throw tokenizer_error(where + ": \"" + field + "\" must be [token, id], got " + v.dump());
  }
  return checked_id(v[1], max_id, where + " " + field);
}

}  // namespace

post_processor::post_processor(const nlohmann::json& spec, const std::string& where, token_id max_id) {
  if (!spec.is_null()) add(spec, where, max_id);
}

// Applies `spec` after what is already collected: its tokens wrap the current ones.
void post_processor::add(const nlohmann::json& spec, const std::string& where, token_id max_id) {
  const std::string type = required_string(spec, "type", where + " post_processor");
  const std::string here = where + " post_processor " + type;
  std::vector<token_id> before, after;
  if (type == "ByteLevel") {
    return;
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    before.push_back(pair_token(spec, "cls", here, max_id));
    after.push_back(pair_token(spec, "sep", here, max_id));
  } else if (type == "TemplateProcessing") {
    const auto& specials = required_object(spec, "special_tokens", here);
    bool seen_sequence = false;
    const auto& single = required_array(spec, "single", here);
    for (std::size_t i = 0; i < single.size(); ++i) {
      const auto& item = single[i];
      const std::string at = here + " single[" + std::to_string(i) + "]";
      if (item.is_object() && item.contains("Sequence")) {
        const auto& s = required_object(item, "Sequence", at);
        if (required_string(s, "id", at + " Sequence") != "A" || seen_sequence) {
          throw tokenizer_error(at + ": the single template must hold the sequence \"A\" exactly once");
        }
        seen_sequence = true;
      } else if (item.is_object() && item.contains("SpecialToken")) {
        const std::string name = required_string(required_object(item, "SpecialToken", at), "id", at + " SpecialToken");
        if (!specials.contains(name)) {
          throw tokenizer_error(at + ": special token \"" + name + "\" is not in \"special_tokens\"");
        }
        const std::string entry = here + " special_tokens[\"" + name + "\"]";
        for (const auto& id : required_array(specials[name], "ids", entry)) {
          (seen_sequence ? after : before).push_back(checked_id(id, max_id, entry));
        }
      } else {
        throw tokenizer_error(at + ": " + item.dump() + " must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_sequence) throw tokenizer_error(here + ": the single template lacks the sequence {\"Sequence\": {\"id\": \"A\"}}");
  } else if (type == "Sequence") {
    for (const auto& p : required_array(spec, "processors", here)) add(p, where, max_id);
    return;
  } else {
    throw tokenizer_error(where + ": post_processor type \"" + type +
                          "\" is not supported (supported: null, TemplateProcessing, BertProcessing, "
                          "RobertaProcessing, ByteLevel, Sequence)");
  }
  before_.insert(before_.begin(), before.begin(), before.end());
  after_.insert(after_.end(), after.begin(), after.end());
}

std::vector<token_id> post_processor::apply(const std::vector<token_id>& ids) const {
  std::vector<token_id> out;
  out.reserve(before_.size() + ids.size() + after_.size());
  out.insert(out.end(), before_.begin(), before_.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), after_.begin(), after_.end());
  return out;
}

}  // namespace cohort::core::tokenizer

// SFT prompt templates: literal text with {field} placeholders (see sft_template.hpp).
#include "core/data/build/sft_template.hpp"

#include <nlohmann/json.hpp>
#include <utility>

#include "core/data/format.hpp"

namespace cohort::core::data {

sft_template::sft_template(const std::string& text, std::string option) : option_(std::move(option)) {
  std::string literal;
  const auto fail = [&](const std::string& why) {
    throw data_error(option_ + " \"" + text + "\": " + why +
                     " (write fields as {name}, a literal brace as {{ or }}, e.g. \"{question}\\n{answer}\")");
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      const char e = text[i + 1];
      if (e == 'n' || e == 't' || e == '\\') {
        literal += e == 'n' ? '\n' : e == 't' ? '\t' : '\\';
        ++i;
        continue;
      }
      literal += c;
    } else if (c == '{' && i + 1 < text.size() && text[i + 1] == '{') {
      literal += '{';
      ++i;
    } else if (c == '}' && i + 1 < text.size() && text[i + 1] == '}') {
      literal += '}';
      ++i;
    } else if (c == '{') {
      const auto close = text.find('}', i + 1);
      if (close == std::string::npos) fail("unclosed '{' at offset " + std::to_string(i));
      const std::string name = text.substr(i + 1, close - i - 1);
      if (name.empty() || name.find('{') != std::string::npos) fail("empty or nested field name at offset " + std::to_string(i));
      if (!literal.empty()) segments_.push_back({false, literal});
      literal.clear();
      segments_.push_back({true, name});
      fields_.push_back(name);
      last_field_ = segments_.size() - 1;
      i = close;
    } else if (c == '}') {
      fail("unmatched '}' at offset " + std::to_string(i));
    } else {
      literal += c;
    }
  }
  if (!literal.empty()) segments_.push_back({false, literal});
  if (fields_.empty()) fail("has no {field} placeholder");
}

rendered_record sft_template::render(const nlohmann::json& record, const std::string& where) const {
  if (!record.is_object()) throw data_error(where + ": expected a JSON object per line");
  rendered_record out;
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const auto& seg = segments_[i];
    std::string& dst = i < last_field_ ? out.prompt : out.completion;
    if (!seg.is_field) {
      dst += seg.text;
      continue;
    }
    const auto it = record.find(seg.text);
    if (it == record.end()) throw data_error(where + ": missing field \"" + seg.text + "\" required by " + option_);
    if (it->is_string()) {
      dst += it->get_ref<const std::string&>();
    } else if (it->is_number() || it->is_boolean()) {
      dst += it->dump();
    } else {
      throw data_error(where + ": field \"" + seg.text + "\" must be a string or a number, not " +
                       std::string(it->type_name()));
    }
  }
  return out;
}

std::string sft_template::render_text(const nlohmann::json& record, const std::string& where) const {
  const auto r = render(record, where);
  return r.prompt + r.completion;
}

}  // namespace cohort::core::data

// SFT prompt templates such as "{question}\n{answer}": literal text with {field} placeholders
// (escapes \n \t \\ and {{ }} are understood). Rendering a jsonl record splits it at the LAST
// placeholder: everything before it is the prompt (masked out of the loss), the rest the completion.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace cohort::core::data {

struct rendered_record {
  std::string prompt;
  std::string completion;
};

class sft_template {
 public:
  // Throws data_error on an unbalanced brace, an empty field name or a template without fields.
  // `option` names the template in errors ("--template", "--template-source", ...).
  explicit sft_template(const std::string& text, std::string option = "--template");

  const std::vector<std::string>& fields() const { return fields_; }
  // Fills the placeholders from a JSON object. String values are used as they are, numbers and
  // booleans as their JSON text; a missing field or another type throws data_error naming `where`.
  rendered_record render(const nlohmann::json& record, const std::string& where) const;
  // The whole rendered text (prompt and completion), as seq2seq source and target templates use it.
  std::string render_text(const nlohmann::json& record, const std::string& where) const;

 private:
  struct segment {
    bool is_field;
    std::string text;  // literal text or field name
  };
  std::vector<segment> segments_;
  std::vector<std::string> fields_;
  std::string option_;
  std::size_t last_field_ = 0;  // index into segments_
};

}  // namespace cohort::core::data

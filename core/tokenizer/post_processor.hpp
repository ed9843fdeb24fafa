// Hugging Face tokenizer.json post-processors, for one sequence: the special token ids that
// add_special_tokens=True puts before and after the ids of a single text (T5's "</s>" after, BERT's
// [CLS] ... [SEP]). TemplateProcessing (its "single" template), BertProcessing, RobertaProcessing,
// ByteLevel (no ids; offsets only) and Sequence. Immutable; safe to share.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {

class post_processor {
 public:
  // `spec` is the "post_processor" value of tokenizer.json (null: nothing added). Its ids are
  // used as written (as Hugging Face does); an id above `max_id`, an unsupported type or a
  // malformed template throws tokenizer_error naming `where` and the field.
  post_processor(const nlohmann::json& spec, const std::string& where, token_id max_id);

  std::vector<token_id> apply(const std::vector<token_id>& ids) const;
  const std::vector<token_id>& before() const { return before_; }
  const std::vector<token_id>& after() const { return after_; }

 private:
  void add(const nlohmann::json& spec, const std::string& where, token_id max_id);

  std::vector<token_id> before_, after_;
};

}  // namespace cohort::core::tokenizer

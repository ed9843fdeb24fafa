// The post-processor of a Hugging Face tokenizer.json for one sequence: which special tokens go
// around a sequence's ids (T5's TemplateProcessing appends "</s>", BERT's puts [CLS] before and
// [SEP] after). Read once at load; apply() is pure and safe from several threads.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {

class post_processor {
 public:
  // `spec` is tokenizer.json's "post_processor" (null: no special tokens). Types read:
  // TemplateProcessing (its "single" template), BertProcessing and RobertaProcessing (cls A sep),
  // ByteLevel (offsets only: no tokens) and Sequence of those. Throws tokenizer_error naming `where`
  // and the field for a malformed one; another type loads, and apply() names it when it is used.
  post_processor(const nlohmann::json& spec, const std::string& where);

  // ids with the single-sequence template's special tokens around them.
  std::vector<token_id> apply(const std::vector<token_id>& ids) const;

 private:
  std::vector<token_id> before_, after_;  // special ids around the sequence
  std::string unsupported_;              // non-empty: why apply() must refuse
};

}  // namespace cohort::core::tokenizer

// Hugging Face tokenizer.json pre-tokenizers: ByteLevel, Split (Regex or String pattern, every
// split behaviour, invert), Digits, Whitespace, WhitespaceSplit, Metaspace and Sequence. They turn
// one normalized segment into the words the model encodes. Immutable; safe to share.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cohort::core::tokenizer {

// One word (or not yet split segment). `at_start`: it begins at offset 0 of the encoded text
// (Metaspace's prepend_scheme "first" needs that).
struct piece {
  std::string text;
  bool at_start = false;
};

class pre_tokenizer {
 public:
  virtual ~pre_tokenizer() = default;
  // Replaces `pieces` by their splits; empty pieces are dropped.
  virtual void apply(std::vector<piece>& pieces) const = 0;
};

// `spec` is the "pre_tokenizer" value of tokenizer.json; null gives nullptr (no splitting).
std::unique_ptr<pre_tokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& where);

// GPT-2's split pattern, used by ByteLevel with use_regex.
extern const char* const gpt2_split_pattern;

}  // namespace cohort::core::tokenizer

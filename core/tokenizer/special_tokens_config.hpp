// The bos / eos / pad token strings that transformers keeps next to a tokenizer file, in
// tokenizer_config.json (preferred) and special_tokens_map.json.
#pragma once

#include <optional>
#include <string>

namespace cohort::core::tokenizer {

struct special_token_names {
  std::optional<std::string> bos, eos, pad;
  bool found_config = false;  // either file exists next to the tokenizer
  std::string source;         // the file(s) read, for error messages
};

// Reads the configs in the directory of `tokenizer_path`. A token may be a string or an object
// with "content"; null or absent leaves it unset. Throws tokenizer_error on malformed JSON.
special_token_names read_special_token_names(const std::string& tokenizer_path);

}  // namespace cohort::core::tokenizer

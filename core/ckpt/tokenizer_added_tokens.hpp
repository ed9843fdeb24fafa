// The data set's added tokens written into an export's tokenizer files, as transformers keeps
// them after tokenizer.add_special_tokens: tokenizer.json's added_tokens, tokenizer_config.json's
// added_tokens_decoder and list of additional special tokens, special_tokens_map.json's
// additional_special_tokens and added_tokens.json. The ids are the data set's (its manifest's
// special_token_ids, carried in a checkpoint's extra.added_tokens): the tokenizer library is
// never run here. Torch- and tokenizer-free; files are edited as JSON, their keys kept in order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cohort::core::ckpt {

struct added_token_id {
  std::int64_t id = 0;
  std::string content;
};

// A checkpoint's extra.added_tokens ([{"id": 128, "content": "<USER>"}, ...]); none when absent.
// Throws ckpt_error (bad_manifest) naming `where` for anything else.
std::vector<added_token_id> added_tokens_of(const nlohmann::json& extra, const std::string& where);

// Adds `tokens` (special, matched whole: lstrip, rstrip, single_word and normalized false) to the
// tokenizer files in DIR: tokenizer.json's added_tokens (kept sorted by id), and where they exist
// tokenizer_config.json (added_tokens_decoder; its extra_special_tokens or
// additional_special_tokens list), special_tokens_map.json (additional_special_tokens) and
// added_tokens.json ({content: id}); added_tokens.json is also written for a sentencepiece model
// without tokenizer.json (tokenizer.model, spiece.model), whose slow tokenizer reads it. A token
// already there with the same id is left as it is. Returns the names of the files it wrote.
// Throws ckpt_error: bad_input when a file gives one of the tokens another id or the id to
// another token (the data set was built with another tokenizer), io when a file cannot be read,
// parsed or written; each names the file.
std::vector<std::string> add_tokens_to_tokenizer_files(const std::string& dir,
                                                       const std::vector<added_token_id>& tokens);

}  // namespace cohort::core::ckpt

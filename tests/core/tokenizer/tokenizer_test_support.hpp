// Shared helpers for the tokenizer tests: a tiny byte-level tokenizer.json builder.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cohort::test {

// A byte-level BPE tokenizer.json: vocab = the 256 GPT-2 byte symbols (id = byte value) plus the
// results of `merges` (ids from 256 on); `pre_tokenizer` as given; ByteLevel decoder.
nlohmann::json byte_level_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges,
                                         const nlohmann::json& pre_tokenizer,
                                         const nlohmann::json& added_tokens = nlohmann::json::array());

// The GPT-2 byte symbol of `b` ("Ġ" for ' ').
std::string byte_symbol(unsigned char b);

}  // namespace cohort::test

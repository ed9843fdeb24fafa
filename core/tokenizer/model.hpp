// The model step of a Hugging Face tokenizer.json: one pre-tokenized word to token ids, and the
// vocabulary both ways. Implementations: bpe_model ("BPE") and unigram_model ("Unigram").
// encode_word may run on several threads at once.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {

class model {
 public:
  virtual ~model() = default;
  // Appends the ids of one pre-tokenized word to `out`.
  virtual void encode_word(const std::string& word, std::vector<token_id>& out) const = 0;
  virtual std::optional<token_id> token_to_id(std::string_view token) const = 0;
  // nullptr for an id the vocab does not have.
  virtual const std::string* id_to_token(token_id id) const = 0;
  virtual token_id max_id() const = 0;
  // Number of vocab entries (Hugging Face's get_vocab_size; BPE ids may have gaps).
  virtual token_id size() const = 0;
};

// The "model" object of tokenizer.json as a model by its "type" (BPE when absent). Throws
// tokenizer_error naming `where` for an unsupported type or a malformed model.
std::unique_ptr<model> make_model(const nlohmann::json& spec, const std::string& where);

// The ids of the byte_fallback tokens "<0x00>".."<0xFF>" in `m`, -1 where the vocab lacks one.
std::array<token_id, 256> byte_fallback_ids(const model& m);

}  // namespace cohort::core::tokenizer

// The Hugging Face "Unigram" model (sentencepiece's unigram language model, as T5, mT5, ALBERT and
// XLNet use): the segmentation of a word with the highest total log-probability score (Viterbi
// over a byte trie of the pieces, linear in the word for a bounded piece length). A character no
// piece starts with becomes unk_id with score min_score - 10; consecutive unknown characters fuse
// into one unk (or, with byte_fallback, into the "<0xXX>" tokens of their bytes when the vocab has
// them all). Immutable after construction; encode_word is safe from several threads.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tokenizer/byte_trie.hpp"
#include "core/tokenizer/model.hpp"

namespace cohort::core::tokenizer {

class unigram_model final : public model {
 public:
  // `spec` is the "model" object of tokenizer.json (type Unigram): "vocab" [[piece, score], ...]
  // (the id is the index), "unk_id" (index or null), "byte_fallback". Throws tokenizer_error
  // naming `where` and the field for a missing or empty vocab, a malformed entry, a duplicate
  // piece or an unk_id outside the vocab.
  unigram_model(const nlohmann::json& spec, const std::string& where);
  unigram_model(const unigram_model&) = delete;
  unigram_model& operator=(const unigram_model&) = delete;

  // Throws tokenizer_error when the word has a character no piece covers and there is no unk_id.
  void encode_word(const std::string& word, std::vector<token_id>& out) const override;
  std::optional<token_id> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(token_id id) const override;
  token_id max_id() const override { return static_cast<token_id>(pieces_.size()) - 1; }
  token_id size() const override { return static_cast<token_id>(pieces_.size()); }

 private:
  // Appends the id of a run of unknown characters: the run itself if it is a piece, else its
  // byte tokens under byte_fallback, else unk_id.
  void emit_unknown(std::string_view run, std::vector<token_id>& out) const;

  std::string where_;
  std::vector<std::string> pieces_;  // by id
  std::vector<double> scores_;       // by id: log probabilities
  std::unordered_map<std::string_view, token_id> ids_;  // views into pieces_
  byte_trie trie_;                                      // piece -> id
  std::optional<token_id> unk_id_;
  double unk_score_ = 0;
  bool byte_fallback_ = false;
  std::array<token_id, 256> byte_ids_{};
};

}  // namespace cohort::core::tokenizer

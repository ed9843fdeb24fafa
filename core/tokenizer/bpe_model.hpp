// The Hugging Face "BPE" model: vocab, merges by rank (Word::merge_all's order), byte_fallback,
// unk_token / fuse_unk, continuing_subword_prefix / end_of_word_suffix, ignore_merges, and a
// word cache. Immutable after construction except the cache, which is guarded: encode_word may
// run on several threads at once. Not movable (the vocab index points into its own storage).
#pragma once

#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {

class bpe_model {
 public:
  // `model` is the "model" object of tokenizer.json (type BPE). Throws tokenizer_error naming
  // `where` and the field for a missing vocab, a malformed or out-of-vocab merge, etc.
  bpe_model(const nlohmann::json& model, const std::string& where);
  bpe_model(const bpe_model&) = delete;
  bpe_model& operator=(const bpe_model&) = delete;

  // Appends the ids of one pre-tokenized word to `out`.
  void encode_word(std::string_view word, std::vector<token_id>& out) const;

  std::optional<token_id> token_to_id(std::string_view token) const;
  // nullptr for an id the vocab does not have.
  const std::string* id_to_token(token_id id) const;
  token_id max_id() const { return static_cast<token_id>(tokens_.size()) - 1; }

 private:
  struct merge {
    std::uint32_t rank;
    token_id new_id;
  };
  std::vector<token_id> merge_word(std::string_view word) const;
  const merge* find_merge(token_id a, token_id b) const;

  std::vector<std::string> tokens_;  // by id; empty string + !present_ for gaps
  std::vector<bool> present_;
  std::unordered_map<std::string_view, token_id> vocab_;  // views into tokens_
  std::unordered_map<std::uint64_t, merge> merges_;
  std::optional<token_id> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  token_id byte_ids_[256] = {};  // ids of "<0x00>".."<0xFF>", -1 where the vocab lacks one

  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<token_id>> cache_;
};

}  // namespace cohort::core::tokenizer

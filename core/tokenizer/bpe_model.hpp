// The Hugging Face "BPE" model (merges by rank, byte_fallback, unk, subword prefix/suffix,
// ignore_merges) with a word cache. encode_word may run on several threads at once (the cache is
// locked); not movable, as the vocab index points into its own storage.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tokenizer/model.hpp"

namespace cohort::core::tokenizer {

class bpe_model final : public model {
 public:
  // `model` is the "model" object of tokenizer.json (type BPE). Throws tokenizer_error naming
  // `where` and the field for a missing vocab, a malformed or out-of-vocab merge, etc.
  bpe_model(const nlohmann::json& model, const std::string& where);
  bpe_model(const bpe_model&) = delete;
  bpe_model& operator=(const bpe_model&) = delete;

  void encode_word(const std::string& word, std::vector<token_id>& out) const override;
  std::optional<token_id> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(token_id id) const override;
  token_id max_id() const override { return static_cast<token_id>(tokens_.size()) - 1; }
  token_id size() const override { return static_cast<token_id>(vocab_.size()); }

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
  std::string unk_token_;           // empty: none
  std::optional<token_id> unk_id_;  // empty when the vocab lacks unk_token_
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::array<token_id, 256> byte_ids_{};  // ids of "<0x00>".."<0xFF>", -1 where the vocab lacks one

  // Word -> ids, split in shards so that threads encoding in parallel rarely share a lock.
  struct cache_shard {
    std::shared_mutex mutex;
    std::unordered_map<std::string, std::vector<token_id>> words;
  };
  static constexpr std::size_t cache_shards = 64;
  mutable std::array<cache_shard, cache_shards> cache_;
};

}  // namespace cohort::core::tokenizer

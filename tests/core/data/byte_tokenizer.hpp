// A test-only tokenizer: one id per byte (3..258), PAD 0, BOS 1, EOS 2, added special tokens from
// 259 on, matched greedily (longest first). Lets builder tests run without a model file.
#pragma once

#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::data::testing {

using cohort::core::tokenizer::token_id;

class byte_tokenizer : public cohort::core::tokenizer::tokenizer {
 public:
  std::vector<token_id> encode(const std::string& text) const override {
    std::vector<token_id> out;
    for (std::size_t i = 0; i < text.size();) {
      std::size_t best = 0;
      int best_id = -1;
      for (std::size_t s = 0; s < specials_.size(); ++s) {
        const auto& t = specials_[s];
        if (t.size() > best && text.compare(i, t.size(), t) == 0) {
          best = t.size();
          best_id = static_cast<int>(259 + s);
        }
      }
      if (best_id >= 0) {
        out.push_back(best_id);
        i += best;
      } else {
        out.push_back(3 + static_cast<unsigned char>(text[i]));
        ++i;
      }
    }
    return out;
  }
  std::string decode(const std::vector<token_id>& ids) const override {
    std::string out;
    for (auto id : ids) {
      if (id >= 3 && id < 259) out += static_cast<char>(id - 3);
      else if (id >= 259) out += specials_[static_cast<std::size_t>(id - 259)];
    }
    return out;
  }
  std::int64_t vocab_size() const override { return 259 + static_cast<std::int64_t>(specials_.size()); }
  std::optional<token_id> bos_id() const override { return 1; }
  std::optional<token_id> eos_id() const override { return 2; }
  std::optional<token_id> pad_id() const override { return 0; }
  std::vector<token_id> add_special_tokens(const std::vector<std::string>& tokens) override {
    std::vector<token_id> ids;
    for (const auto& t : tokens) {
      specials_.push_back(t);
      ids.push_back(static_cast<token_id>(258 + specials_.size()));
    }
    return ids;
  }
  std::optional<token_id> token_to_id(const std::string& token) const override {
    for (std::size_t s = 0; s < specials_.size(); ++s)
      if (specials_[s] == token) return static_cast<token_id>(259 + s);
    if (token.size() == 1) return 3 + static_cast<unsigned char>(token[0]);
    return std::nullopt;
  }
  std::string identity() const override { return "test-bytes"; }

 private:
  std::vector<std::string> specials_;
};

}  // namespace cohort::core::data::testing

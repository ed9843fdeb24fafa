// Added tokens of a Hugging Face tokenizer (special and not): found in the text before
// pre-tokenization, leftmost-longest, with the lstrip / rstrip / single_word rules of
// tokenizers' AddedVocabulary. Not thread-safe to add() while another thread splits.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {

struct added_token {
  std::string content;
  token_id id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A run of text that still needs encoding (id empty) or one added token (id set).
struct text_segment {
  std::string text;
  std::optional<token_id> id;
  bool at_start = false;  // begins at offset 0 of the original text
};

class added_vocabulary {
 public:
  // `normalized_content`: the content as the normalizer turns it (for tokens with normalized=true).
  void add(const added_token& token, std::string normalized_content);
  const std::vector<added_token>& tokens() const { return tokens_; }
  const added_token* find_content(std::string_view content) const;
  const added_token* find_id(token_id id) const;

  // Splits `text` around the added tokens whose `normalized` flag equals `normalized`.
  std::vector<text_segment> split(std::string_view text, bool normalized, bool at_start) const;

 private:
  struct trie {
    struct node {
      std::vector<std::pair<unsigned char, int>> next;
      int token = -1;  // index into tokens_
    };
    std::vector<node> nodes{1};
    std::array<bool, 256> first_byte{};
    void insert(std::string_view key, int token);
    // Longest key starting at `pos`: (token index, length) or token -1.
    std::pair<int, std::size_t> longest_at(std::string_view text, std::size_t pos) const;
  };
  std::vector<added_token> tokens_;
  trie raw_, normalized_;
};

}  // namespace cohort::core::tokenizer

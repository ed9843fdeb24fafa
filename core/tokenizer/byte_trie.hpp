// A read-only byte trie over distinct non-empty keys, each with a non-negative int32 value: the
// prefix searches of the Unigram model (its pieces) and of the Precompiled normalizer (its rules).
// Children are stored contiguously and sorted by byte; the root's children sit in a 256-slot
// table. Immutable after construction; safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cohort::core::tokenizer {

class byte_trie {
 public:
  byte_trie() { root_.fill(-1); }
  // Keys must be distinct and non-empty (checked by the callers, who can name the file).
  explicit byte_trie(const std::vector<std::pair<std::string, std::int32_t>>& entries);

  // Calls visit(length, value) for every key that is a prefix of text[pos..], shortest first.
  template <typename Visit>
  void for_each_prefix(std::string_view text, std::size_t pos, Visit&& visit) const {
    if (pos >= text.size()) return;
    std::int32_t at = root_[static_cast<unsigned char>(text[pos])];
    for (std::size_t i = pos; at >= 0;) {
      const node& n = nodes_[static_cast<std::size_t>(at)];
      if (n.value >= 0) visit(i + 1 - pos, n.value);
      if (++i >= text.size()) return;
      at = child(n, static_cast<unsigned char>(text[i]));
    }
  }

  // The value of the shortest key that is a prefix of `text`, or -1.
  std::int32_t shortest_prefix(std::string_view text) const;

 private:
  struct node {
    std::uint32_t first_child = 0;  // index of its first child in nodes_ / labels_
    std::uint32_t child_count = 0;
    std::int32_t value = -1;        // -1: no key ends here
  };
  std::int32_t child(const node& n, unsigned char label) const;

  std::array<std::int32_t, 256> root_;  // node index of each first byte, -1 when none
  std::vector<node> nodes_;
  std::vector<unsigned char> labels_;  // the byte that leads to nodes_[i]
};

}  // namespace cohort::core::tokenizer

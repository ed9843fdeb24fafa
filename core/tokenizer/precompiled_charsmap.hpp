// sentencepiece's normalization rules as Hugging Face's "Precompiled" normalizer holds them (the
// base64 "precompiled_charsmap" of tokenizer.json, the same bytes as a .model's
// normalizer_spec.precompiled_charsmap). Layout, little-endian:
//   u32 trie_bytes | trie: trie_bytes / 4 u32 units of a darts-clone double-array trie |
//   replacements: NUL-terminated UTF-8 strings, which the trie's values index by byte offset.
// Each key of the trie is a UTF-8 sequence (one character, or a decomposed character) and its
// value the normalized text to put in its place. The whole trie is walked at load (bounds and
// key lengths checked) into a byte_trie of the rules. Immutable; safe to share between threads.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/byte_trie.hpp"

namespace cohort::core::tokenizer {

class precompiled_charsmap {
 public:
  // `bytes` is the decoded charsmap; `where` names the file and field in errors (tokenizer_error)
  // for a short header, a trie cut short or pointing outside itself, a value outside the
  // replacements, or replacements that are not NUL-terminated UTF-8.
  precompiled_charsmap(std::string_view bytes, const std::string& where);

  // Hugging Face's Precompiled::normalize: each extended grapheme cluster shorter than 6 bytes
  // that starts with a key becomes the replacement of the shortest such key (the rest of the
  // cluster is dropped, as Hugging Face does); other clusters are normalized character by
  // character, characters without a rule kept as they are.
  std::string apply(std::string_view text) const;

 private:
  void append_grapheme(std::string_view grapheme, std::string& out) const;

  byte_trie rules_;                       // key -> index into replacements_
  std::vector<std::string> replacements_;
};

}  // namespace cohort::core::tokenizer

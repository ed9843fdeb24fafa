// sentencepiece's precompiled_charsmap: decoded, checked and applied (see precompiled_charsmap.hpp).
#include "core/tokenizer/precompiled_charsmap.hpp"

#include <algorithm>
#include <cstdint>

#include "core/tokenizer/tokenizer.hpp"
#include "core/tokenizer/unicode.hpp"

namespace cohort::core::tokenizer {
namespace {

// A darts-clone unit: a node's label and the offset to its children, or (in a leaf unit) a value.
struct unit {
  std::uint32_t bits;
  bool has_leaf() const { return ((bits >> 8) & 1) != 0; }
  std::uint32_t value() const { return bits & 0x7FFFFFFFu; }
  std::uint32_t label() const { return bits & (0x80000000u | 0xFFu); }
  std::uint32_t offset() const { return (bits >> 10) << ((bits & (1u << 9)) >> 6); }
};

std::uint32_t read_u32(std::string_view bytes, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return v;
}

constexpr std::size_t max_key_bytes = 256;  // sentencepiece's keys are a few characters
constexpr std::size_t max_paths = std::size_t{1} << 24;

}  // namespace

precompiled_charsmap::precompiled_charsmap(std::string_view bytes, const std::string& where) {
  if (bytes.size() < 4) {
    throw tokenizer_error(where + ": " + std::to_string(bytes.size()) +
                          " bytes are too short; it must start with the u32 byte size of its trie");
  }
  const std::uint32_t trie_bytes = read_u32(bytes, 0);
  if (trie_bytes == 0 || trie_bytes % 4 != 0) {
    throw tokenizer_error(where + ": the trie size " + std::to_string(trie_bytes) + " must be a positive multiple of 4");
  }
  if (trie_bytes > bytes.size() - 4) {
    throw tokenizer_error(where + ": truncated: the header gives a trie of " + std::to_string(trie_bytes) +
                          " bytes but only " + std::to_string(bytes.size() - 4) + " follow");
  }
  std::vector<unit> units(trie_bytes / 4);
  for (std::size_t i = 0; i < units.size(); ++i) units[i].bits = read_u32(bytes, 4 + 4 * i);
  const std::string_view blob = bytes.substr(4 + trie_bytes);
  if (const auto bad = utf8_invalid_at(blob)) {
    throw tokenizer_error(where + ": the replacement strings are not valid UTF-8 (byte " + std::to_string(*bad) + ")");
  }

  // Depth-first over every node: a child of the node whose children start at `base` sits at
  // base ^ label and carries that label; a child with has_leaf ends a key, its value in the unit
  // at its own children's base.
  struct frame {
    std::size_t base;
    std::string key;
  };
  std::vector<frame> stack{{units[0].offset(), std::string()}};
  std::size_t paths = 0;
  std::vector<std::pair<std::string, std::int32_t>> entries;
  while (!stack.empty()) {
    frame f = std::move(stack.back());
    stack.pop_back();
    if (f.base >= units.size()) {
      throw tokenizer_error(where + ": malformed trie: a node's children start at unit " + std::to_string(f.base) +
                            ", past its " + std::to_string(units.size()) + " units (cut short?)");
    }
    for (std::uint32_t label = 1; label < 256; ++label) {
      const std::size_t at = f.base ^ label;
      if (at >= units.size() || units[at].label() != label) continue;
      // darts-clone shares equal suffixes (the trie is a DAWG), so a unit may be reached along
      // several paths; only a loop or an absurd number of paths marks a broken trie.
      if (f.key.size() >= max_key_bytes || ++paths > max_paths) {
        throw tokenizer_error(where + ": malformed trie: keys longer than " + std::to_string(max_key_bytes) +
                              " bytes or more than " + std::to_string(max_paths) + " of them (a loop?)");
      }
      std::string key = f.key + static_cast<char>(label);
      const std::size_t child_base = at ^ units[at].offset();
      if (units[at].has_leaf()) {
        if (child_base >= units.size()) {
          throw tokenizer_error(where + ": malformed trie: the value of key " + std::to_string(entries.size()) +
                                " is at unit " + std::to_string(child_base) + ", past its " +
                                std::to_string(units.size()) + " units (cut short?)");
        }
        const std::size_t value = units[child_base].value();
        const std::size_t nul = value < blob.size() ? blob.find('\0', value) : std::string_view::npos;
        if (nul == std::string_view::npos) {
          throw tokenizer_error(where + ": malformed trie: a rule's replacement at byte " + std::to_string(value) +
                                " is not a NUL-terminated string inside the " + std::to_string(blob.size()) +
                                " bytes of replacements");
        }
        entries.emplace_back(key, static_cast<std::int32_t>(replacements_.size()));
        replacements_.emplace_back(blob.substr(value, nul - value));
      }
      stack.push_back({child_base, std::move(key)});
    }
  }
  for (const auto& [key, index] : entries) {
    if (utf8_invalid_at(key)) {
      throw tokenizer_error(where + ": malformed trie: rule " + std::to_string(index) + " has a key that is not UTF-8");
    }
  }
  rules_ = byte_trie(entries);
}

void precompiled_charsmap::append_grapheme(std::string_view grapheme, std::string& out) const {
  if (grapheme.size() < 6) {
    const std::int32_t whole = rules_.shortest_prefix(grapheme);
    if (whole >= 0) {
      out += replacements_[static_cast<std::size_t>(whole)];
      return;
    }
    if (utf8_length(static_cast<unsigned char>(grapheme[0])) >= grapheme.size()) {  // one character, no rule
      out += grapheme;
      return;
    }
  }
  for (std::size_t pos = 0; pos < grapheme.size();) {
    const std::size_t length = std::min(utf8_length(static_cast<unsigned char>(grapheme[pos])), grapheme.size() - pos);
    const std::string_view c = grapheme.substr(pos, length);
    const std::int32_t r = rules_.shortest_prefix(c);
    if (r >= 0) {
      out += replacements_[static_cast<std::size_t>(r)];
    } else {
      out += c;
    }
    pos += length;
  }
}

std::string precompiled_charsmap::apply(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  const auto bounds = grapheme_boundaries(text);
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    append_grapheme(text.substr(bounds[i], bounds[i + 1] - bounds[i]), out);
  }
  return out;
}

}  // namespace cohort::core::tokenizer

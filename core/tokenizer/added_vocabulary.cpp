// Added tokens of a Hugging Face tokenizer (special and not) (see added_vocabulary.hpp).
#include "core/tokenizer/added_vocabulary.hpp"

#include <algorithm>

#include "core/tokenizer/unicode.hpp"

namespace cohort::core::tokenizer {
namespace {

// The code point that ends just before `end`.
char32_t last_char(std::string_view s, std::size_t end, std::size_t& begin) {
  begin = end - 1;
  while (begin > 0 && (static_cast<unsigned char>(s[begin]) & 0xC0) == 0x80) --begin;
  std::size_t pos = begin;
  return utf8_next(s, pos);
}

bool ends_with_word(std::string_view s, std::size_t end) {
  if (end == 0) return false;
  std::size_t begin = 0;
  const char32_t c = last_char(s, end, begin);
  return is_word_char(c);
}

bool starts_with_word(std::string_view s, std::size_t begin) {
  if (begin >= s.size()) return false;
  const char32_t c = utf8_next(s, begin);
  return is_word_char(c);
}

// Start of the whitespace run that ends at `end`.
std::size_t whitespace_run_start(std::string_view s, std::size_t end) {
  while (end > 0) {
    std::size_t begin = 0;
    if (!is_whitespace(last_char(s, end, begin))) break;
    end = begin;
  }
  return end;
}

// End of the whitespace run that starts at `begin`.
std::size_t whitespace_run_end(std::string_view s, std::size_t begin) {
  while (begin < s.size()) {
    std::size_t pos = begin;
    if (!is_whitespace(utf8_next(s, pos))) break;
    begin = pos;
  }
  return begin;
}

}  // namespace

void added_vocabulary::trie::insert(std::string_view key, int token) {
  if (key.empty()) return;
  first_byte[static_cast<unsigned char>(key[0])] = true;
  int at = 0;
  for (const char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    auto& next = nodes[static_cast<std::size_t>(at)].next;
    const auto it = std::find_if(next.begin(), next.end(), [&](const auto& e) { return e.first == c; });
    if (it != next.end()) {
      at = it->second;
    } else {
      const int created = static_cast<int>(nodes.size());
      next.emplace_back(c, created);
      nodes.emplace_back();
      at = created;
    }
  }
  nodes[static_cast<std::size_t>(at)].token = token;
}

std::pair<int, std::size_t> added_vocabulary::trie::longest_at(std::string_view text, std::size_t pos) const {
  std::pair<int, std::size_t> best{-1, 0};
  int at = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto& next = nodes[static_cast<std::size_t>(at)].next;
    const auto it = std::find_if(next.begin(), next.end(), [&](const auto& e) { return e.first == c; });
    if (it == next.end()) break;
    at = it->second;
    if (nodes[static_cast<std::size_t>(at)].token >= 0) best = {nodes[static_cast<std::size_t>(at)].token, i + 1 - pos};
  }
  return best;
}

void added_vocabulary::add(const added_token& token, std::string normalized_content) {
  const int index = static_cast<int>(tokens_.size());
  tokens_.push_back(token);
  tokens_.back().decoded = token.normalized ? normalized_content : token.content;
  by_content_[token.content] = tokens_.size() - 1;
  by_id_[token.id] = tokens_.size() - 1;
  if (token.normalized) {
    normalized_.insert(normalized_content, index);
  } else {
    raw_.insert(token.content, index);
  }
}

const added_token* added_vocabulary::find_content(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

const added_token* added_vocabulary::find_id(token_id id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

// AddedVocabulary::find_matches of Hugging Face tokenizers.
std::vector<text_segment> added_vocabulary::split(std::string_view text, bool normalized, bool at_start) const {
  const trie& t = normalized ? normalized_ : raw_;
  std::vector<text_segment> out;
  std::size_t emitted = 0;  // end of what is already in `out`
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (!t.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [index, length] = t.longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const added_token& token = tokens_[static_cast<std::size_t>(index)];
    std::size_t start = pos, stop = pos + length;
    pos = stop;
    if (token.single_word && (ends_with_word(text, start) || starts_with_word(text, stop))) continue;
    if (token.lstrip) start = std::max(whitespace_run_start(text, start), emitted);
    if (token.rstrip) stop = whitespace_run_end(text, stop);
    if (emitted < start) out.push_back({std::string(text.substr(emitted, start - emitted)), std::nullopt, at_start && emitted == 0});
    out.push_back({std::string(), token.id, false});
    emitted = stop;
  }
  if (emitted < text.size()) {
    out.push_back({std::string(text.substr(emitted)), std::nullopt, at_start && emitted == 0});
  }
  return out;
}

}  // namespace cohort::core::tokenizer

// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) and the onig-style
// iteration over its matches that Hugging Face's pre-tokenizers rely on. Compiled once; safe to
// use from several threads (each call owns its match data).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cohort::core::tokenizer {

class compiled_regex {
 public:
  // `literal`: the pattern is a plain string, not a regex. Throws tokenizer_error naming `where`
  // when the pattern does not compile.
  compiled_regex(const std::string& pattern, bool literal, const std::string& where);
  ~compiled_regex();
  compiled_regex(const compiled_regex&) = delete;
  compiled_regex& operator=(const compiled_regex&) = delete;

  // Non-overlapping matches as [begin, end) byte offsets, left to right. An empty match right
  // after the previous match is skipped (as onig's find_iter does). `text` must be valid UTF-8.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace cohort::core::tokenizer

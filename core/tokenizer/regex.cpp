// A compiled PCRE2 pattern and the onig-style patterns tokenizer.json uses (see regex.hpp).
#include "core/tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/tokenizer/tokenizer.hpp"
#include "core/tokenizer/unicode.hpp"

namespace cohort::core::tokenizer {

namespace {

// Oniguruma (which Hugging Face uses for Split / Replace) and PCRE2 disagree on two Unicode
// classes: onig's \s is the White_Space property (PCRE2 adds U+180E) and onig's \w is
// Alphabetic + marks + Nd + Pc + Join_Control (PCRE2: letters, all numbers, '_'). Rewrite them,
// and \b / \B, which are defined by \w.
constexpr const char* word_set = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control})";

std::string onig_to_pcre2(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 'Q') {  // \Q...\E: literal text, copied as is
        const std::size_t end = pattern.find("\\E", i + 2);
        const std::size_t stop = end == std::string::npos ? pattern.size() : end + 2;
        out.append(pattern, i, stop - i);
        i = stop - 1;
      } else if (e == 's') {
        out += R"(\p{White_Space})";
        ++i;
      } else if (e == 'S') {
        out += R"(\P{White_Space})";
        ++i;
      } else if (e == 'w') {
        out += in_class ? std::string(word_set) : "[" + std::string(word_set) + "]";
        ++i;
      } else if (e == 'W' && !in_class) {
        out += "[^" + std::string(word_set) + "]";
        ++i;
      } else if ((e == 'b' || e == 'B') && !in_class) {  // word boundaries over the same \w
        const std::string w = "[" + std::string(word_set) + "]";
        out += e == 'b' ? "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))"
                        : "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
        ++i;
      } else {
        out += c;
        out += e;
        ++i;
      }
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {  // [:alpha:]
      const std::size_t end = pattern.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(pattern, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct compiled_regex::impl {
  pcre2_code* code = nullptr;
  bool jit = false;
};

compiled_regex::compiled_regex(const std::string& pattern, bool literal, const std::string& where)
    : impl_(std::make_unique<impl>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  // LITERAL refuses UCP
  const std::string translated = literal ? pattern : onig_to_pcre2(pattern);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                              &error, &offset, nullptr);
  if (impl_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw tokenizer_error(where + ": the regex " + pattern + " does not compile at offset " +
                          std::to_string(offset) + ": " + reinterpret_cast<const char*>(message));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

compiled_regex::~compiled_regex() { pcre2_code_free(impl_->code); }

std::vector<std::pair<std::size_t, std::size_t>> compiled_regex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (data == nullptr) throw tokenizer_error("regex: out of memory creating match data");
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  bool have_last = false;
  std::size_t last_end = 0;
  while (start <= text.size()) {
    int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), start, 0, data, nullptr)
                        : PCRE2_ERROR_JIT_BADOPTION;
    if (rc == PCRE2_ERROR_JIT_BADOPTION || rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // No JIT, or its 32 KiB stack ran out: the interpreter keeps its backtracking on the heap.
      rc = pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw tokenizer_error(std::string("regex match failed: ") + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
    const std::size_t b = ov[0], e = ov[1];
    if (b == e && have_last && last_end == e) {
      // An empty match right after the previous one: step over one character and retry.
      if (start >= text.size()) break;
      start += utf8_length(static_cast<unsigned char>(text[start]));
      continue;
    }
    matches.emplace_back(b, e);
    have_last = true;
    last_end = e;
    start = e;
  }
  pcre2_match_data_free(data);
  return matches;
}

}  // namespace cohort::core::tokenizer

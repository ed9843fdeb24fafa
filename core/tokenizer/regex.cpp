#include "core/tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/tokenizer/tokenizer.hpp"
#include "core/tokenizer/unicode.hpp"

namespace cohort::core::tokenizer {

struct compiled_regex::impl {
  pcre2_code* code = nullptr;
  bool jit = false;
};

compiled_regex::compiled_regex(const std::string& pattern, bool literal, const std::string& where)
    : impl_(std::make_unique<impl>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  // LITERAL refuses UCP
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
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
    const int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), start, 0, data, nullptr)
                              : pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data, nullptr);
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

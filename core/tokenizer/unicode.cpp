// Unicode helpers the tokenizers share (see unicode.hpp).
#include "core/tokenizer/unicode.hpp"

#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utext.h>

#include <algorithm>
#include <memory>
#include <unordered_map>

#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {

std::size_t utf8_length(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b >> 5) == 0x6) return 2;
  if ((b >> 4) == 0xE) return 3;
  if ((b >> 3) == 0x1E) return 4;
  return 1;
}

char32_t utf8_next(std::string_view s, std::size_t& pos) {
  const auto b = static_cast<unsigned char>(s[pos]);
  const std::size_t n = utf8_length(b);
  char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (std::size_t i = 1; i < n && pos + i < s.size(); ++i) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3F);
  }
  pos += n;
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// How the bytes after lead byte `b0` must look: sequence length and the range of the second byte
// (which excludes overlongs, surrogates and code points beyond U+10FFFF). n == 0: invalid lead.
struct utf8_lead {
  std::size_t n;
  unsigned char lo, hi;
};

constexpr unsigned char byte(int v) { return static_cast<unsigned char>(v); }

utf8_lead lead_of(unsigned char b0) {
  if (b0 < 0x80) return {1, 0, 0};
  if (b0 >= 0xC2 && b0 <= 0xDF) return {2, 0x80, 0xBF};
  if (b0 >= 0xE0 && b0 <= 0xEF) return {3, byte(b0 == 0xE0 ? 0xA0 : 0x80), byte(b0 == 0xED ? 0x9F : 0xBF)};
  if (b0 >= 0xF0 && b0 <= 0xF4) return {4, byte(b0 == 0xF0 ? 0x90 : 0x80), byte(b0 == 0xF4 ? 0x8F : 0xBF)};
  return {0, 0, 0};
}

// Number of bytes at `pos` that form a valid sequence or the longest valid prefix of one
// (at least 1), and whether the sequence is complete.
std::size_t scan_sequence(std::string_view s, std::size_t pos, bool& complete) {
  const utf8_lead lead = lead_of(static_cast<unsigned char>(s[pos]));
  complete = lead.n == 1;
  if (lead.n <= 1) return 1;
  std::size_t i = 1;
  for (; i < lead.n && pos + i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    const unsigned char lo = i == 1 ? lead.lo : 0x80, hi = i == 1 ? lead.hi : 0xBF;
    if (b < lo || b > hi) break;
  }
  complete = i == lead.n;
  return i;
}

}  // namespace

std::optional<std::size_t> utf8_invalid_at(std::string_view s) {
  std::size_t pos = 0;
  while (pos < s.size()) {
    bool complete = false;
    const std::size_t n = scan_sequence(s, pos, complete);
    if (!complete) return pos;
    pos += n;
  }
  return std::nullopt;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t pos = 0;
  while (pos < s.size()) {
    bool complete = false;
    const std::size_t n = scan_sequence(s, pos, complete);
    if (complete) {
      out.append(s.substr(pos, n));
    } else {
      out.append("\xEF\xBF\xBD");  // one U+FFFD per maximal invalid subpart, as Rust does
    }
    pos += n;
  }
  return out;
}

const std::array<std::string, 256>& byte_to_unicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      utf8_append(t[static_cast<std::size_t>(b)], cp);
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t cp) {
  static const std::unordered_map<char32_t, int> inverse = [] {
    std::unordered_map<char32_t, int> m;
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) {
      std::size_t pos = 0;
      m.emplace(utf8_next(t[static_cast<std::size_t>(b)], pos), b);
    }
    return m;
  }();
  const auto it = inverse.find(cp);
  return it == inverse.end() ? -1 : it->second;
}

std::vector<std::size_t> grapheme_boundaries(std::string_view s) {
  std::vector<std::size_t> out{0};
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    // Between two ASCII characters every boundary is a cluster boundary except inside CR LF.
    for (std::size_t i = 1; i <= s.size(); ++i) {
      if (i == s.size() || s[i - 1] != '\r' || s[i] != '\n') out.push_back(i);
    }
    return out;
  }
  // One iterator per thread: creating one loads ICU's rules, and an iterator is not thread-safe.
  thread_local std::unique_ptr<icu::BreakIterator> iterator;
  UErrorCode status = U_ZERO_ERROR;
  if (!iterator) {
    iterator.reset(icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), status));
    if (U_FAILURE(status) || !iterator) {
      iterator.reset();
      throw tokenizer_error(std::string("ICU grapheme break iterator unavailable: ") + u_errorName(status));
    }
  }
  UText* text = utext_openUTF8(nullptr, s.data(), static_cast<std::int64_t>(s.size()), &status);
  iterator->setText(text, status);
  if (U_FAILURE(status)) {
    utext_close(text);
    throw tokenizer_error(std::string("ICU grapheme segmentation failed: ") + u_errorName(status));
  }
  iterator->first();
  for (std::int32_t b = iterator->next(); b != icu::BreakIterator::DONE; b = iterator->next()) {
    out.push_back(static_cast<std::size_t>(b));
  }
  utext_close(text);
  return out;
}

std::string normalize(std::string_view s, normal_form form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case normal_form::nfc: n = icu::Normalizer2::getNFCInstance(status); break;
    case normal_form::nfd: n = icu::Normalizer2::getNFDInstance(status); break;
    case normal_form::nfkc: n = icu::Normalizer2::getNFKCInstance(status); break;
    case normal_form::nfkd: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status) || n == nullptr) {
    throw tokenizer_error(std::string("ICU normalizer unavailable: ") + u_errorName(status));
  }
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  if (n->isNormalized(in, status) && U_SUCCESS(status)) return std::string(s);
  status = U_ZERO_ERROR;
  const icu::UnicodeString out = n->normalize(in, status);
  if (U_FAILURE(status)) throw tokenizer_error(std::string("ICU normalization failed: ") + u_errorName(status));
  std::string result;
  out.toUTF8String(result);
  return result;
}

std::string to_lower(std::string_view s) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  u.toLower(icu::Locale::getRoot());
  std::string result;
  u.toUTF8String(result);
  return result;
}

bool is_numeric(char32_t cp) {
  const auto type = u_charType(static_cast<UChar32>(cp));
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

bool is_word_char(char32_t cp) {
  const auto c = static_cast<UChar32>(cp);
  if (u_isUAlphabetic(c) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) return true;
  return (U_GET_GC_MASK(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

bool is_whitespace(char32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }

}  // namespace cohort::core::tokenizer

// Unicode helpers the tokenizers share: UTF-8 walking and validation, the GPT-2 byte <-> unicode
// table, grapheme clusters and Unicode normalization forms (ICU) and the character classes Hugging Face uses.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::core::tokenizer {

// Byte length of the UTF-8 sequence starting with lead byte `b` (1 for invalid leads).
std::size_t utf8_length(unsigned char b);
// Decodes the code point at `pos` (which must start a valid sequence) and advances `pos`.
char32_t utf8_next(std::string_view s, std::size_t& pos);
void utf8_append(std::string& out, char32_t cp);
// Byte offset of the first invalid UTF-8 sequence, or nullopt when `s` is valid.
std::optional<std::size_t> utf8_invalid_at(std::string_view s);
// Replaces invalid sequences with U+FFFD, as Rust's String::from_utf8_lossy does.
std::string utf8_lossy(std::string_view s);

// GPT-2's bytes_to_unicode(): each byte maps to one printable code point, UTF-8 encoded.
const std::array<std::string, 256>& byte_to_unicode();
// Inverse of byte_to_unicode(); -1 for a code point that no byte maps to.
int unicode_to_byte(char32_t cp);

// Byte offsets of the extended grapheme cluster boundaries of valid UTF-8 `s` (Unicode UAX #29,
// ICU's rules), 0 and s.size() included. Thread-safe.
std::vector<std::size_t> grapheme_boundaries(std::string_view s);

enum class normal_form { nfc, nfd, nfkc, nfkd };
std::string normalize(std::string_view s, normal_form form);
std::string to_lower(std::string_view s);

// Rust's char::is_numeric / is_whitespace, which Hugging Face uses.
bool is_numeric(char32_t cp);
bool is_whitespace(char32_t cp);
// A character of Rust regex's Unicode \w (Alphabetic, marks, Nd, Pc, Join_Control): what
// Hugging Face's single_word rule counts as part of a word.
bool is_word_char(char32_t cp);

}  // namespace cohort::core::tokenizer

// Hugging Face tokenizer.json normalizers as plain string transforms (offsets are not tracked):
// NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Precompiled (sentencepiece's rules,
// see precompiled_charsmap.hpp) and Sequence. Anything else is refused
// at load time. Immutable after construction; safe to share between threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace cohort::core::tokenizer {

class normalizer {
 public:
  virtual ~normalizer() = default;
  virtual std::string apply(std::string_view text) const = 0;
};

// `spec` is the "normalizer" value of tokenizer.json; null gives nullptr (identity). `where`
// names the file for error messages.
std::unique_ptr<normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where);

}  // namespace cohort::core::tokenizer

// Hugging Face tokenizer.json normalizers as plain string transforms (see normalizer.hpp).
#include "core/tokenizer/normalizer.hpp"

#include <nlohmann/json.hpp>
#include <sodium.h>

#include <vector>

#include "core/tokenizer/json_fields.hpp"
#include "core/tokenizer/precompiled_charsmap.hpp"
#include "core/tokenizer/regex.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/tokenizer/unicode.hpp"

namespace cohort::core::tokenizer {
namespace {

class unicode_normalizer final : public normalizer {
 public:
  explicit unicode_normalizer(normal_form form) : form_(form) {}
  std::string apply(std::string_view text) const override { return normalize(text, form_); }

 private:
  normal_form form_;
};

class lowercase_normalizer final : public normalizer {
 public:
  std::string apply(std::string_view text) const override { return to_lower(text); }
};

class prepend_normalizer final : public normalizer {
 public:
  explicit prepend_normalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string apply(std::string_view text) const override {
    if (text.empty()) return std::string();
    return prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

class replace_normalizer final : public normalizer {
 public:
  replace_normalizer(const std::string& pattern, bool literal, std::string content, const std::string& where)
      : regex_(pattern, literal, where), content_(std::move(content)) {}
  std::string apply(std::string_view text) const override {
    std::string out;
    std::size_t prev = 0;
    for (const auto& [b, e] : regex_.find_all(text)) {
      out.append(text.substr(prev, b - prev));
      out.append(content_);
      prev = e;
    }
    out.append(text.substr(prev));
    return out;
  }

 private:
  compiled_regex regex_;
  std::string content_;
};

class strip_normalizer final : public normalizer {
 public:
  strip_normalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string apply(std::string_view text) const override {
    std::size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        std::size_t pos = begin;
        if (!is_whitespace(utf8_next(text, pos))) break;
        begin = pos;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        std::size_t pos = start;
        if (!is_whitespace(utf8_next(text, pos))) break;
        end = start;
      }
    }
    return std::string(text.substr(begin, end - begin));
  }

 private:
  bool left_, right_;
};

class precompiled_normalizer final : public normalizer {
 public:
  precompiled_normalizer(std::string_view bytes, const std::string& where) : map_(bytes, where) {}
  std::string apply(std::string_view text) const override { return map_.apply(text); }

 private:
  precompiled_charsmap map_;
};

// Standard base64 with padding, as Hugging Face writes precompiled_charsmap.
std::string base64_decode(const std::string& text, const std::string& where) {
  std::string out(text.size() / 4 * 3 + 3, '\0');
  std::size_t length = 0;
  const char* end = nullptr;
  const int rc = sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(), text.size(),
                                   nullptr, &length, &end, sodium_base64_VARIANT_ORIGINAL);
  if (rc != 0 || end != text.data() + text.size()) {
    const auto at = end == nullptr ? std::size_t{0} : static_cast<std::size_t>(end - text.data());
    throw tokenizer_error(where + ": \"precompiled_charsmap\" is not valid base64 (standard alphabet with padding; "
                          "bad or cut short at character " + std::to_string(at) + " of " + std::to_string(text.size()) + ")");
  }
  out.resize(length);
  return out;
}

class sequence_normalizer final : public normalizer {
 public:
  explicit sequence_normalizer(std::vector<std::unique_ptr<normalizer>> parts) : parts_(std::move(parts)) {}
  std::string apply(std::string_view text) const override {
    std::string s(text);
    for (const auto& p : parts_) s = p->apply(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<normalizer>> parts_;
};

}  // namespace

std::unique_ptr<normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = required_string(spec, "type", where);
  const std::string here = where + " normalizer " + type;
  if (type == "NFC") return std::make_unique<unicode_normalizer>(normal_form::nfc);
  if (type == "NFD") return std::make_unique<unicode_normalizer>(normal_form::nfd);
  if (type == "NFKC") return std::make_unique<unicode_normalizer>(normal_form::nfkc);
  if (type == "NFKD") return std::make_unique<unicode_normalizer>(normal_form::nfkd);
  if (type == "Lowercase") return std::make_unique<lowercase_normalizer>();
  if (type == "Prepend") return std::make_unique<prepend_normalizer>(required_string(spec, "prepend", here));
  if (type == "Strip") {
    return std::make_unique<strip_normalizer>(optional_bool(spec, "strip_left", true, here),
                                              optional_bool(spec, "strip_right", true, here));
  }
  if (type == "Replace") {
    const pattern_spec p = read_pattern(spec, here);
    return std::make_unique<replace_normalizer>(p.pattern, p.literal, required_string(spec, "content", here), here);
  }
  if (type == "Precompiled") {
    const std::string bytes = base64_decode(required_string(spec, "precompiled_charsmap", here), here);
    return std::make_unique<precompiled_normalizer>(bytes, here + " precompiled_charsmap");
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<normalizer>> parts;
    for (const auto& n : required_array(spec, "normalizers", here)) {
      auto part = make_normalizer(n, where);
      if (part) parts.push_back(std::move(part));
    }
    return std::make_unique<sequence_normalizer>(std::move(parts));
  }
  throw tokenizer_error(where + ": normalizer type \"" + type +
                        "\" is not supported (supported: null, NFC, NFD, NFKC, NFKD, Lowercase, Prepend, "
                        "Replace, Strip, Precompiled, Sequence)");
}

}  // namespace cohort::core::tokenizer

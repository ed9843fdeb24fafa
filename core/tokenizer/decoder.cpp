// Hugging Face tokenizer.json decoders (see decoder.hpp).
#include "core/tokenizer/decoder.hpp"

#include <nlohmann/json.hpp>

#include <cctype>

#include "core/tokenizer/json_fields.hpp"
#include "core/tokenizer/regex.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/tokenizer/unicode.hpp"

namespace cohort::core::tokenizer {
namespace {

class byte_level_decoder final : public decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      std::string mapped;
      bool all_mapped = true;
      std::size_t pos = 0;
      while (pos < t.size()) {
        const int b = unicode_to_byte(utf8_next(t, pos));
        if (b < 0) {
          all_mapped = false;
          break;
        }
        mapped.push_back(static_cast<char>(b));
      }
      bytes.append(all_mapped ? mapped : t);
    }
    return {utf8_lossy(bytes)};
  }
};

// "<0xAB>" tokens become bytes; a run of them that is not valid UTF-8 gives one U+FFFD per byte.
class byte_fallback_decoder final : public decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string run;
    std::size_t run_tokens = 0;
    const auto flush = [&] {
      if (run_tokens == 0) return;
      if (utf8_invalid_at(run)) {
        for (std::size_t i = 0; i < run_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");
      } else {
        out.push_back(run);
      }
      run.clear();
      run_tokens = 0;
    };
    for (auto& t : tokens) {
      unsigned value = 0;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4]))) {
        value = static_cast<unsigned>(std::stoul(t.substr(3, 2), nullptr, 16));
        run.push_back(static_cast<char>(value));
        ++run_tokens;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }
};

class fuse_decoder final : public decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    return {all};
  }
};

class strip_decoder final : public decoder {
 public:
  strip_decoder(std::string content, std::size_t start, std::size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      std::size_t begin = 0, end = t.size();
      for (std::size_t i = 0; i < start_ && begin + content_.size() <= end && t.compare(begin, content_.size(), content_) == 0;
           ++i) {
        begin += content_.size();
      }
      for (std::size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                              t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      t = t.substr(begin, end - begin);
    }
    return tokens;
  }

 private:
  std::string content_;
  std::size_t start_, stop_;
};

class replace_decoder final : public decoder {
 public:
  replace_decoder(const pattern_spec& p, std::string content, const std::string& where)
      : regex_(p.pattern, p.literal, where), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      std::string out;
      std::size_t prev = 0;
      for (const auto& [b, e] : regex_.find_all(t)) {
        out.append(t, prev, b - prev);
        out.append(content_);
        prev = e;
      }
      out.append(t, prev, std::string::npos);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  compiled_regex regex_;
  std::string content_;
};

class metaspace_decoder final : public decoder {
 public:
  metaspace_decoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (std::size_t pos = 0; pos < t.size();) {
        if (!replacement_.empty() && t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && strip_first_)) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class sequence_decoder final : public decoder {
 public:
  explicit sequence_decoder(std::vector<std::unique_ptr<decoder>> parts) : parts_(std::move(parts)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& p : parts_) tokens = p->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<decoder>> parts_;
};

std::size_t required_count(const nlohmann::json& spec, const char* field, const std::string& where) {
  if (!spec.contains(field) || !spec[field].is_number_unsigned()) {
    throw tokenizer_error(where + ": field \"" + field + "\" must be a non-negative integer");
  }
  return spec[field].get<std::size_t>();
}

}  // namespace

std::unique_ptr<decoder> make_decoder(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = required_string(spec, "type", where + " decoder");
  const std::string here = where + " decoder " + type;
  if (type == "ByteLevel") return std::make_unique<byte_level_decoder>();
  if (type == "ByteFallback") return std::make_unique<byte_fallback_decoder>();
  if (type == "Fuse") return std::make_unique<fuse_decoder>();
  if (type == "Strip") {
    return std::make_unique<strip_decoder>(required_string(spec, "content", here), required_count(spec, "start", here),
                                           required_count(spec, "stop", here));
  }
  if (type == "Replace") {
    return std::make_unique<replace_decoder>(read_pattern(spec, here), required_string(spec, "content", here), here);
  }
  if (type == "Metaspace") {
    bool strip_first = optional_bool(spec, "add_prefix_space", true, here);
    if (spec.contains("prepend_scheme")) strip_first = required_string(spec, "prepend_scheme", here) != "never";
    return std::make_unique<metaspace_decoder>(required_string(spec, "replacement", here), strip_first);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<decoder>> parts;
    for (const auto& d : required_array(spec, "decoders", here)) {
      auto part = make_decoder(d, where);
      if (part) parts.push_back(std::move(part));
    }
    return std::make_unique<sequence_decoder>(std::move(parts));
  }
  throw tokenizer_error(where + ": decoder type \"" + type +
                        "\" is not supported (supported: null, ByteLevel, ByteFallback, Fuse, Strip, Replace, "
                        "Metaspace, Sequence)");
}

std::string run_decoder(const decoder* d, std::vector<std::string> tokens) {
  std::string out;
  if (d == nullptr) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  for (const auto& t : d->decode_chain(std::move(tokens))) out += t;
  return out;
}

}  // namespace cohort::core::tokenizer

// Hugging Face tokenizer.json pre-tokenizers (see pre_tokenizer.hpp).
#include "core/tokenizer/pre_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <utility>

#include "core/tokenizer/json_fields.hpp"
#include "core/tokenizer/regex.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/tokenizer/unicode.hpp"

namespace cohort::core::tokenizer {

namespace {

// GPT-2's split pattern, used by ByteLevel with use_regex.
constexpr const char* gpt2_split_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class split_behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

using span = std::pair<std::size_t, std::size_t>;
struct segment {
  span range;
  bool flag;  // a match before the behaviour is applied; "remove" after
};

// Hugging Face's Pattern::find_matches: the text cut into alternating non-match / match spans.
std::vector<segment> segments_of(const std::vector<span>& matches, std::size_t size, bool invert) {
  std::vector<segment> out;
  if (size == 0) return {{{0, 0}, invert}};
  std::size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) out.push_back({{prev, b}, invert});
    out.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev != size) out.push_back({{prev, size}, invert});
  return out;
}

// NormalizedString::split: which spans survive under `behavior` (flag = remove).
std::vector<segment> apply_behavior(std::vector<segment> matches, split_behavior behavior) {
  std::vector<segment> acc;
  bool previous_match = false;
  switch (behavior) {
    case split_behavior::isolated:
      for (auto& m : matches) m.flag = false;
      return matches;
    case split_behavior::removed:
      return matches;
    case split_behavior::contiguous:
      for (const auto& m : matches) {
        if (m.flag == previous_match && !acc.empty()) {
          acc.back().range.second = m.range.second;
        } else {
          acc.push_back({m.range, false});
        }
        previous_match = m.flag;
      }
      return acc;
    case split_behavior::merged_with_previous:
      for (const auto& m : matches) {
        if (m.flag && !previous_match && !acc.empty()) {
          acc.back().range.second = m.range.second;
        } else {
          acc.push_back({m.range, false});
        }
        previous_match = m.flag;
      }
      return acc;
    case split_behavior::merged_with_next:
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->flag && !previous_match && !acc.empty()) {
          acc.back().range.first = it->range.first;
        } else {
          acc.push_back({it->range, false});
        }
        previous_match = it->flag;
      }
      return {acc.rbegin(), acc.rend()};
  }
  return acc;
}

// Matches of a character predicate, one per matching character.
std::vector<span> char_matches(const std::string& text, const std::function<bool(char32_t)>& pred) {
  std::vector<span> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t b = pos;
    const char32_t cp = utf8_next(text, pos);
    if (pred(cp)) out.emplace_back(b, pos);
  }
  return out;
}

// Splits every piece by the spans `find` returns for it, under `behavior`.
template <typename Find>
void split_pieces(std::vector<piece>& pieces, split_behavior behavior, bool invert, const Find& find) {
  std::vector<piece> out;
  out.reserve(pieces.size() * 2);
  for (auto& p : pieces) {
    const auto kept = apply_behavior(segments_of(find(p.text), p.text.size(), invert), behavior);
    bool first = true;
    for (const auto& s : kept) {
      if (s.flag || s.range.first == s.range.second) continue;
      out.push_back({p.text.substr(s.range.first, s.range.second - s.range.first), p.at_start && first &&
                                                                                       s.range.first == 0});
      first = false;
    }
  }
  pieces = std::move(out);
}

class byte_level final : public pre_tokenizer {
 public:
  byte_level(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<compiled_regex>(gpt2_split_pattern, false, "ByteLevel") : nullptr) {}

  void apply(std::vector<piece>& pieces) const override {
    if (add_prefix_space_) {
      for (auto& p : pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(p.text.begin(), ' ');
      }
    }
    if (regex_) {
      split_pieces(pieces, split_behavior::isolated, false, [&](const std::string& t) { return regex_->find_all(t); });
    }
    const auto& table = byte_to_unicode();
    for (auto& p : pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (const char c : p.text) mapped.append(table[static_cast<unsigned char>(c)]);
      p.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<compiled_regex> regex_;
};

class split final : public pre_tokenizer {
 public:
  split(const pattern_spec& pattern, split_behavior behavior, bool invert, const std::string& where)
      : regex_(pattern.pattern, pattern.literal, where), behavior_(behavior), invert_(invert) {}
  void apply(std::vector<piece>& pieces) const override {
    split_pieces(pieces, behavior_, invert_, [&](const std::string& t) { return regex_.find_all(t); });
  }

 private:
  compiled_regex regex_;
  split_behavior behavior_;
  bool invert_;
};

class predicate_split final : public pre_tokenizer {
 public:
  predicate_split(std::function<bool(char32_t)> pred, split_behavior behavior)
      : pred_(std::move(pred)), behavior_(behavior) {}
  void apply(std::vector<piece>& pieces) const override {
    split_pieces(pieces, behavior_, false, [&](const std::string& t) { return char_matches(t, pred_); });
  }

 private:
  std::function<bool(char32_t)> pred_;
  split_behavior behavior_;
};

class whitespace final : public pre_tokenizer {
 public:
  whitespace() : regex_(R"(\w+|[^\w\s]+)", false, "Whitespace") {}
  void apply(std::vector<piece>& pieces) const override {
    split_pieces(pieces, split_behavior::removed, true, [&](const std::string& t) { return regex_.find_all(t); });
  }

 private:
  compiled_regex regex_;
};

class metaspace final : public pre_tokenizer {
 public:
  metaspace(std::string replacement, std::string prepend_scheme, bool split)
      : replacement_(std::move(replacement)), prepend_scheme_(std::move(prepend_scheme)), split_(split) {}
  void apply(std::vector<piece>& pieces) const override {
    for (auto& p : pieces) {
      std::string t;
      t.reserve(p.text.size() + replacement_.size());
      for (const char c : p.text) {
        if (c == ' ') {
          t.append(replacement_);
        } else {
          t.push_back(c);
        }
      }
      const bool prepend = prepend_scheme_ == "always" || (prepend_scheme_ == "first" && p.at_start);
      if (prepend && t.compare(0, replacement_.size(), replacement_) != 0) t.insert(0, replacement_);
      p.text = std::move(t);
    }
    if (split_) {
      split_pieces(pieces, split_behavior::merged_with_next, false, [&](const std::string& t) {
        std::vector<span> out;
        for (std::size_t pos = t.find(replacement_); pos != std::string::npos;
             pos = t.find(replacement_, pos + replacement_.size())) {
          out.emplace_back(pos, pos + replacement_.size());
        }
        return out;
      });
    }
  }

 private:
  std::string replacement_, prepend_scheme_;
  bool split_;
};

class sequence final : public pre_tokenizer {
 public:
  explicit sequence(std::vector<std::unique_ptr<pre_tokenizer>> parts) : parts_(std::move(parts)) {}
  void apply(std::vector<piece>& pieces) const override {
    for (const auto& p : parts_) p->apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<pre_tokenizer>> parts_;
};

split_behavior behavior_of(const nlohmann::json& spec, const std::string& where) {
  const std::string b = required_string(spec, "behavior", where);
  if (b == "Removed") return split_behavior::removed;
  if (b == "Isolated") return split_behavior::isolated;
  if (b == "MergedWithPrevious") return split_behavior::merged_with_previous;
  if (b == "MergedWithNext") return split_behavior::merged_with_next;
  if (b == "Contiguous") return split_behavior::contiguous;
  throw tokenizer_error(where + ": \"behavior\" is \"" + b +
                        "\"; allowed: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

}  // namespace

std::unique_ptr<pre_tokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = required_string(spec, "type", where + " pre_tokenizer");
  const std::string here = where + " pre_tokenizer " + type;
  if (type == "ByteLevel") {
    return std::make_unique<byte_level>(optional_bool(spec, "add_prefix_space", true, here),
                                        optional_bool(spec, "use_regex", true, here));
  }
  if (type == "Split") {
    return std::make_unique<split>(read_pattern(spec, here), behavior_of(spec, here),
                                   optional_bool(spec, "invert", false, here), here);
  }
  if (type == "Digits") {
    return std::make_unique<predicate_split>(is_numeric, optional_bool(spec, "individual_digits", false, here)
                                                             ? split_behavior::isolated
                                                             : split_behavior::contiguous);
  }
  if (type == "Whitespace") return std::make_unique<whitespace>();
  if (type == "WhitespaceSplit") return std::make_unique<predicate_split>(is_whitespace, split_behavior::removed);
  if (type == "Metaspace") {
    std::string scheme = "always";
    if (spec.contains("prepend_scheme")) {
      scheme = required_string(spec, "prepend_scheme", here);
    } else if (!optional_bool(spec, "add_prefix_space", true, here)) {
      scheme = "never";
    }
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      throw tokenizer_error(here + ": \"prepend_scheme\" is \"" + scheme + "\"; allowed: always, first, never");
    }
    return std::make_unique<metaspace>(required_string(spec, "replacement", here), scheme,
                                       optional_bool(spec, "split", true, here));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<pre_tokenizer>> parts;
    for (const auto& p : required_array(spec, "pretokenizers", here)) {
      auto part = make_pre_tokenizer(p, where);
      if (part) parts.push_back(std::move(part));
    }
    return std::make_unique<sequence>(std::move(parts));
  }
  throw tokenizer_error(where + ": pre_tokenizer type \"" + type +
                        "\" is not supported (supported: null, ByteLevel, Split, Digits, Whitespace, "
                        "WhitespaceSplit, Metaspace, Sequence)");
}

}  // namespace cohort::core::tokenizer

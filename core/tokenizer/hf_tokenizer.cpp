// A Hugging Face tokenizer.json with a BPE or Unigram model (see hf_tokenizer.hpp).
#include "core/tokenizer/hf_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include "core/tokenizer/file_digest.hpp"
#include "core/tokenizer/json_fields.hpp"
#include "core/tokenizer/special_tokens_config.hpp"
#include "core/tokenizer/unicode.hpp"

namespace cohort::core::tokenizer {
namespace {

void check_utf8(const std::string& text, const char* what) {
  if (const auto at = utf8_invalid_at(text)) {
    throw tokenizer_error(std::string(what) + " is not valid UTF-8 (byte " + std::to_string(*at) +
                          "); decode or clean the input first");
  }
}

}  // namespace

hf_tokenizer::hf_tokenizer(const std::string& path) : where_(path) {
  const std::string bytes = read_file(path);
  digest_ = sha256_hex(bytes);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    throw tokenizer_error(path + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object()) throw tokenizer_error(path + ": expected a tokenizer.json object");
  if (!doc.contains("model")) {
    throw tokenizer_error(path + ": required field \"model\" is missing; is this a Hugging Face tokenizer.json?");
  }
  const auto& model_spec = required_object(doc, "model", path);
  normalizer_ = make_normalizer(doc.value("normalizer", nlohmann::json()), path);
  pre_tokenizer_ = make_pre_tokenizer(doc.value("pre_tokenizer", nlohmann::json()), path);
  model_ = make_model(model_spec, path);
  kind_ = model_spec.value("type", std::string("BPE")) == "Unigram" ? "hf-unigram" : "hf-bpe";
  decoder_ = make_decoder(doc.value("decoder", nlohmann::json()), path);
  max_id_ = model_->max_id();

  if (doc.contains("added_tokens") && !doc["added_tokens"].is_null()) {
    const auto& tokens = required_array(doc, "added_tokens", path);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::string here = path + " added_tokens[" + std::to_string(i) + "]";
      const auto& t = tokens[i];
      added_token a;
      a.content = required_string(t, "content", here);
      if (a.content.empty()) throw tokenizer_error(here + ": \"content\" is empty");
      check_utf8(a.content, (here + " content").c_str());
      if (!t.contains("id") || !t["id"].is_number_unsigned() || t["id"].get<std::uint64_t>() > INT32_MAX) {
        throw tokenizer_error(here + ": \"id\" must be a non-negative integer");
      }
      a.special = optional_bool(t, "special", false, here);
      a.lstrip = optional_bool(t, "lstrip", false, here);
      a.rstrip = optional_bool(t, "rstrip", false, here);
      a.single_word = optional_bool(t, "single_word", false, here);
      a.normalized = optional_bool(t, "normalized", !a.special, here);
      // Like Hugging Face, the file's "id" is not trusted: the id follows from the vocab and the
      // order of added_tokens (they agree in every consistent file).
      register_added(std::move(a));
    }
  }
  resolve_special_tokens(path);
  post_processor_ = std::make_unique<post_processor>(doc.value("post_processor", nlohmann::json()), path, max_id_);
}

void hf_tokenizer::resolve_special_tokens(const std::string& path) {
  const special_token_names names = read_special_token_names(path);
  const auto resolve = [&](const std::optional<std::string>& name, const char* field) -> std::optional<token_id> {
    if (!name) return std::nullopt;
    const auto id = token_to_id(*name);
    if (!id) {
      throw tokenizer_error(names.source + ": " + field + " \"" + *name + "\" is neither in the vocab nor an added token of " +
                            path);
    }
    return id;
  };
  bos_ = resolve(names.bos, "bos_token");
  eos_ = resolve(names.eos, "eos_token");
  pad_ = resolve(names.pad, "pad_token");
  if (names.found_config) return;
  // No transformers config: recognise the usual special added tokens by name.
  const auto first_special = [&](std::initializer_list<const char*> candidates) -> std::optional<token_id> {
    for (const char* c : candidates) {
      if (const added_token* t = added_.find_content(c)) return t->id;
    }
    return std::nullopt;
  };
  bos_ = first_special({"<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"});
  eos_ = first_special({"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"});
  pad_ = first_special({"<pad>", "<|pad|>", "<|padding|>"});
}

token_id hf_tokenizer::register_added(added_token token) {
  if (const auto existing = token_to_id(token.content)) {
    token.id = *existing;
  } else {
    const token_id model_size = model_->size();
    token.id = max_added_id_ && *max_added_id_ >= model_size ? *max_added_id_ + 1 : model_size;
  }
  max_added_id_ = std::max(max_added_id_.value_or(token.id), token.id);
  max_id_ = std::max(max_id_, token.id);
  const std::string normalized =
      token.normalized && normalizer_ ? normalizer_->apply(token.content) : token.content;
  added_.add(token, normalized);
  return token.id;
}

std::optional<token_id> hf_tokenizer::token_to_id(const std::string& token) const {
  if (const added_token* t = added_.find_content(token)) return t->id;
  return model_->token_to_id(token);
}

std::vector<token_id> hf_tokenizer::post_process(const std::vector<token_id>& ids) const {
  return post_processor_->apply(ids);
}

void hf_tokenizer::encode_segment(const text_segment& segment, std::vector<token_id>& out) const {
  const std::string normalized = normalizer_ ? normalizer_->apply(segment.text) : segment.text;
  for (const auto& part : added_.split(normalized, true, segment.at_start)) {
    if (part.id) {
      out.push_back(*part.id);
      continue;
    }
    std::vector<piece> pieces{{part.text, part.at_start}};
    if (pre_tokenizer_) pre_tokenizer_->apply(pieces);
    for (const auto& p : pieces) model_->encode_word(p.text, out);
  }
}

std::vector<token_id> hf_tokenizer::encode(const std::string& text) const {
  check_utf8(text, "the text to encode");
  std::vector<token_id> out;
  out.reserve(text.size() / 3 + 1);
  for (const auto& segment : added_.split(text, false, true)) {
    if (segment.id) {
      out.push_back(*segment.id);
    } else {
      encode_segment(segment, out);
    }
  }
  return out;
}

std::vector<token_id> hf_tokenizer::encode_with_special_tokens(const std::string& text) const {
  return post_process(encode(text));
}

std::string hf_tokenizer::decode(const std::vector<token_id>& ids) const { return decode(ids, false); }

std::string hf_tokenizer::decode(const std::vector<token_id>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const token_id id : ids) {
    if (const added_token* t = added_.find_id(id)) {
      if (!(skip_special_tokens && t->special)) tokens.push_back(t->decoded);
    } else if (const std::string* s = model_->id_to_token(id)) {
      tokens.push_back(*s);
    } else {
      throw tokenizer_error(where_ + ": cannot decode token id " + std::to_string(id) + "; valid ids are 0.." +
                            std::to_string(max_id_));
    }
  }
  return run_decoder(decoder_.get(), std::move(tokens));
}

std::vector<token_id> hf_tokenizer::add_special_tokens(const std::vector<std::string>& tokens) {
  std::vector<token_id> ids;
  for (const auto& content : tokens) {
    if (content.empty()) throw tokenizer_error("add_special_tokens: a token is empty");
    check_utf8(content, "add_special_tokens: the token");
    if (const added_token* t = added_.find_content(content)) {
      ids.push_back(t->id);
      continue;
    }
    added_token a;
    a.content = content;
    a.special = true;
    const token_id id = register_added(std::move(a));
    runtime_added_.push_back(content);
    ids.push_back(id);
  }
  return ids;
}

std::string hf_tokenizer::identity() const {
  return tokenizer_identity(kind_, digest_, runtime_added_);
}

}  // namespace cohort::core::tokenizer

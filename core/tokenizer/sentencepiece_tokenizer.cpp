// A sentencepiece tokenizer.model through libsentencepiece (see sentencepiece_tokenizer.hpp).
#include "core/tokenizer/sentencepiece_tokenizer.hpp"

#include "core/tokenizer/file_digest.hpp"
#include "core/tokenizer/special_tokens_config.hpp"
#include "core/tokenizer/unicode.hpp"

namespace cohort::core::tokenizer {

sentencepiece_tokenizer::sentencepiece_tokenizer(const std::string& path) : where_(path) {
  const std::string bytes = read_file(path);
  digest_ = sha256_hex(bytes);
  const auto status = sp_.LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    throw tokenizer_error(path + ": not a sentencepiece model (" + status.ToString() +
                          "); expected a tokenizer.model or a Hugging Face tokenizer.json");
  }
  next_id_ = sp_.GetPieceSize();
  const auto id_or_none = [](int id) -> std::optional<token_id> {
    if (id < 0) return std::nullopt;
    return id;
  };
  bos_ = id_or_none(sp_.bos_id());
  eos_ = id_or_none(sp_.eos_id());
  pad_ = id_or_none(sp_.pad_id());
  const special_token_names names = read_special_token_names(path);
  const auto resolve = [&](const std::optional<std::string>& name, const char* field, std::optional<token_id>& slot) {
    if (!name) return;
    const auto id = piece_id(*name);
    if (!id) throw tokenizer_error(names.source + ": " + field + " \"" + *name + "\" is not a piece of " + path);
    slot = id;
  };
  resolve(names.bos, "bos_token", bos_);
  resolve(names.eos, "eos_token", eos_);
  resolve(names.pad, "pad_token", pad_);
}

std::optional<token_id> sentencepiece_tokenizer::piece_id(const std::string& piece) const {
  const int id = sp_.PieceToId(piece);
  if (id < 0 || (sp_.IsUnknown(id) && sp_.IdToPiece(id) != piece)) return std::nullopt;
  return id;
}

std::optional<token_id> sentencepiece_tokenizer::token_to_id(const std::string& token) const {
  if (const added_token* t = added_.find_content(token)) return t->id;
  return piece_id(token);
}

std::vector<token_id> sentencepiece_tokenizer::encode(const std::string& text) const {
  if (const auto at = utf8_invalid_at(text)) {
    throw tokenizer_error("the text to encode is not valid UTF-8 (byte " + std::to_string(*at) +
                          "); decode or clean the input first");
  }
  std::vector<token_id> out;
  std::vector<int> ids;
  for (const auto& segment : added_.split(text, false, true)) {
    if (segment.id) {
      out.push_back(*segment.id);
      continue;
    }
    const auto status = sp_.Encode(segment.text, &ids);
    if (!status.ok()) throw tokenizer_error(where_ + ": sentencepiece encode failed: " + status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

std::string sentencepiece_tokenizer::decode(const std::vector<token_id>& ids) const {
  std::string out;
  std::vector<int> run;
  std::string piece_text;
  const auto flush = [&] {
    if (run.empty()) return;
    const auto status = sp_.Decode(run, &piece_text);
    if (!status.ok()) throw tokenizer_error(where_ + ": sentencepiece decode failed: " + status.ToString());
    out += piece_text;
    run.clear();
  };
  for (const token_id id : ids) {
    if (const added_token* t = added_.find_id(id)) {
      flush();
      out += t->content;
    } else if (id >= 0 && id < sp_.GetPieceSize()) {
      run.push_back(id);
    } else {
      throw tokenizer_error(where_ + ": cannot decode token id " + std::to_string(id) + "; valid ids are 0.." +
                            std::to_string(next_id_ - 1));
    }
  }
  flush();
  return out;
}

std::vector<token_id> sentencepiece_tokenizer::add_special_tokens(const std::vector<std::string>& tokens) {
  std::vector<token_id> ids;
  for (const auto& content : tokens) {
    if (content.empty()) throw tokenizer_error("add_special_tokens: a token is empty");
    if (utf8_invalid_at(content)) throw tokenizer_error("add_special_tokens: token is not valid UTF-8");
    if (const added_token* t = added_.find_content(content)) {
      ids.push_back(t->id);
      continue;
    }
    added_token a;
    a.content = content;
    a.special = true;
    const auto existing = piece_id(content);
    a.id = existing ? *existing : next_id_++;
    added_.add(a, content);
    runtime_added_.push_back(content);
    ids.push_back(a.id);
  }
  return ids;
}

std::string sentencepiece_tokenizer::identity() const {
  return tokenizer_identity("sentencepiece", digest_, runtime_added_);
}

}  // namespace cohort::core::tokenizer

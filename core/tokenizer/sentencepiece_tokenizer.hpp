// A sentencepiece tokenizer.model (Llama, Mistral) through libsentencepiece: encode() is
// libsentencepiece's own encoding, except that tokens given to add_special_tokens are split out
// first. Control pieces written in the text ("<s>") stay text, as libsentencepiece does.
// encode/decode are safe from several threads; add_special_tokens is not.
#pragma once

#include <sentencepiece_processor.h>

#include <string>
#include <vector>

#include "core/tokenizer/added_vocabulary.hpp"
#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {

class sentencepiece_tokenizer final : public tokenizer {
 public:
  // Throws tokenizer_error naming `path` when it is not a sentencepiece model.
  explicit sentencepiece_tokenizer(const std::string& path);

  std::vector<token_id> encode(const std::string& text) const override;
  std::string decode(const std::vector<token_id>& ids) const override;
  std::int64_t vocab_size() const override { return next_id_; }
  std::optional<token_id> bos_id() const override { return bos_; }
  std::optional<token_id> eos_id() const override { return eos_; }
  std::optional<token_id> pad_id() const override { return pad_; }
  std::vector<token_id> add_special_tokens(const std::vector<std::string>& tokens) override;
  std::optional<token_id> token_to_id(const std::string& token) const override;
  std::string identity() const override;

 private:
  std::optional<token_id> piece_id(const std::string& piece) const;

  std::string where_;
  std::string digest_;
  sentencepiece::SentencePieceProcessor sp_;
  added_vocabulary added_;
  token_id next_id_ = 0;
  std::optional<token_id> bos_, eos_, pad_;
  std::vector<std::string> runtime_added_;
};

}  // namespace cohort::core::tokenizer

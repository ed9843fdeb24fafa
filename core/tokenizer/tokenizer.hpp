// The tokenizer interface the data builders and tools use: text to token ids and back, plus the
// special tokens a model needs. Implementations: Hugging Face tokenizer.json (BPE or Unigram) and
// sentencepiece models (tokenizer.model, T5's spiece.model). No torch here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cohort::core::tokenizer {

using token_id = std::int32_t;

class tokenizer {
 public:
  virtual ~tokenizer() = default;
  // Encodes UTF-8 text to ids (invalid UTF-8 throws). Added tokens of a tokenizer.json written
  // literally in the text ("<|endoftext|>") become their ids, as Hugging Face does; for a
  // sentencepiece model only tokens registered with add_special_tokens do (libsentencepiece keeps
  // "<s>" as text). No BOS/EOS is added. Safe to call from several threads at once.
  virtual std::vector<token_id> encode(const std::string& text) const = 0;
  // `ids` (from encode) with the special tokens the tokenizer's post-processor puts around one
  // sequence, as Hugging Face's encode(add_special_tokens=True) does: T5's tokenizer.json appends
  // "</s>". A tokenizer without one (a tokenizer.json whose post_processor is null, a sentencepiece
  // .model) returns `ids` unchanged. Safe to call from several threads at once.
  virtual std::vector<token_id> post_process(const std::vector<token_id>& ids) const { return ids; }
  // Ids back to text; special tokens are kept. An id outside the vocabulary throws.
  virtual std::string decode(const std::vector<token_id>& ids) const = 0;
  virtual std::int64_t vocab_size() const = 0;  // including added tokens
  virtual std::optional<token_id> bos_id() const = 0;
  virtual std::optional<token_id> eos_id() const = 0;
  virtual std::optional<token_id> pad_id() const = 0;
  // Adds tokens that encode() must treat as indivisible (SFT role markers); returns their ids.
  // A token already in the vocabulary keeps its id (and is matched as a whole from then on);
  // others get ids from vocab_size() upwards. Not thread-safe against concurrent encode().
  virtual std::vector<token_id> add_special_tokens(const std::vector<std::string>& tokens) = 0;
  // The id of one token string (a vocabulary entry, sentencepiece piece or added token).
  virtual std::optional<token_id> token_to_id(const std::string& token) const = 0;
  // Identity for manifests: "hf-bpe:<sha256 of the file>", "hf-unigram:<sha256>" or
  // "sentencepiece:<sha256>", plus
  // "+added:<hash>" once add_special_tokens added tokens.
  virtual std::string identity() const = 0;
};

class tokenizer_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Loads by file: *.json → Hugging Face tokenizer.json, otherwise a sentencepiece model. A
// directory is searched for tokenizer.json, then tokenizer.model, then spiece.model (T5). Throws
// tokenizer_error.
std::unique_ptr<tokenizer> load_tokenizer(const std::string& path);

}  // namespace cohort::core::tokenizer

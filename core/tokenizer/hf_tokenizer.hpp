// A Hugging Face tokenizer.json with a BPE model (GPT-2 / Qwen2 / Llama-3 byte-level style and
// sentencepiece-style BPE with byte_fallback) or a Unigram model (T5's sentencepiece pipeline):
// added tokens, normalizer, pre-tokenizer, model, post-processor, decoder. encode/decode are safe
// to call from several threads; add_special_tokens is not.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tokenizer/added_vocabulary.hpp"
#include "core/tokenizer/decoder.hpp"
#include "core/tokenizer/model.hpp"
#include "core/tokenizer/normalizer.hpp"
#include "core/tokenizer/post_processor.hpp"
#include "core/tokenizer/pre_tokenizer.hpp"
#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {

class hf_tokenizer final : public tokenizer {
 public:
  // Reads tokenizer.json at `path` (and tokenizer_config.json / special_tokens_map.json next to
  // it). Throws tokenizer_error naming the file and field for anything malformed or unsupported.
  explicit hf_tokenizer(const std::string& path);

  std::vector<token_id> encode(const std::string& text) const override;
  std::vector<token_id> post_process(const std::vector<token_id>& ids) const override;
  std::string decode(const std::vector<token_id>& ids) const override;
  // encode() wrapped by the post_processor, as Hugging Face's add_special_tokens=True does for
  // one text (T5: the ids then "</s>").
  std::vector<token_id> encode_with_special_tokens(const std::string& text) const;
  // decode() that leaves out the added tokens marked special, as skip_special_tokens=True does.
  std::string decode(const std::vector<token_id>& ids, bool skip_special_tokens) const;
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(max_id_) + 1; }
  std::optional<token_id> bos_id() const override { return bos_; }
  std::optional<token_id> eos_id() const override { return eos_; }
  std::optional<token_id> pad_id() const override { return pad_; }
  std::vector<token_id> add_special_tokens(const std::vector<std::string>& tokens) override;
  std::optional<token_id> token_to_id(const std::string& token) const override;
  std::string identity() const override;

 private:
  void encode_segment(const text_segment& segment, std::vector<token_id>& out) const;
  void resolve_special_tokens(const std::string& path);
  // Registers an added token under the id Hugging Face's AddedVocabulary gives it: its existing
  // id when the vocab or the added tokens have it, otherwise the next id after both.
  token_id register_added(added_token token);

  std::string where_;
  std::string digest_;
  std::unique_ptr<normalizer> normalizer_;
  std::unique_ptr<pre_tokenizer> pre_tokenizer_;
  std::string kind_;  // "hf-bpe" or "hf-unigram", for identity()
  std::unique_ptr<model> model_;
  std::unique_ptr<post_processor> post_processor_;
  std::unique_ptr<decoder> decoder_;
  added_vocabulary added_;
  token_id max_id_ = -1;
  std::optional<token_id> max_added_id_;
  std::optional<token_id> bos_, eos_, pad_;
  std::vector<std::string> runtime_added_;  // tokens added after loading, for identity()
};

}  // namespace cohort::core::tokenizer

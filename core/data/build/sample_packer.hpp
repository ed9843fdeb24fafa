// Turns tokenized records into samples, in input order, for the shard writer: pack or pad, BOS/EOS
// around documents, SFT prompts masked out, over-long samples truncated and counted; seq2seq
// source/target pairs (already fitted to their lengths by the builder) written and counted.
// Single-threaded (the builder's writer thread).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/data/shard_writer.hpp"

namespace cohort::core::data {

enum class sample_kind { pretrain, sft, seq2seq, pairs };
enum class sample_layout { pack, pad };

struct packer_config {
  sample_kind kind = sample_kind::pretrain;
  sample_layout layout = sample_layout::pack;
  std::int64_t seq_len = 0;
  std::optional<std::int32_t> bos_id;  // prepended to each document / SFT record when set
  std::int32_t eos_id = 0;             // appended to each document / SFT record
};

struct encoded_record {
  std::vector<std::int32_t> ids;
  std::size_t prompt_tokens = 0;  // SFT: the first prompt_tokens ids are the prompt
  bool doc_end = true;            // pretraining text: the document ends after these ids
  // seq2seq: `ids` is the source, `target_ids` the target, both final (post-processed and fitted
  // to their lengths); *_cut count the tokens truncation removed; `skip`: left out (over-long).
  // pairs: `ids` is the chosen text, `target_ids` the rejected one (each without BOS and EOS).
  std::vector<std::int32_t> target_ids;
  std::int64_t source_cut = 0;
  std::int64_t target_cut = 0;
  bool skip = false;
};

// Pretraining records are BOS/EOS-delimited documents, packed into seq_len blocks (pack; the last
// block may be short) or one document per sample (pad). SFT records become BOS prompt completion EOS
// with the prompt masked out, one per sample (pad) or greedily packed whole into seq_len blocks (pack).
// Pairs records become two samples, BOS chosen EOS then BOS rejected EOS, each cut to seq_len (the
// EOS too when over it, as DeepSpeed-Chat's tokenizer call truncates), without a loss mask.
class sample_packer {
 public:
  sample_packer(shard_writer& writer, const packer_config& config);
  void add(const encoded_record& record);
  void finish();  // writes whatever is still buffered

  std::int64_t records() const { return records_; }
  std::int64_t truncated_samples() const { return truncated_samples_; }
  std::int64_t truncated_tokens() const { return truncated_tokens_; }
  std::int64_t truncated_target_samples() const { return truncated_target_samples_; }  // seq2seq
  std::int64_t truncated_target_tokens() const { return truncated_target_tokens_; }    // seq2seq
  std::int64_t skipped_samples() const { return skipped_samples_; }                    // seq2seq

 private:
  void add_pretrain(const encoded_record& r);
  void add_sft(const encoded_record& r);
  void add_seq2seq(const encoded_record& r);
  void add_pairs(const encoded_record& r);
  void add_delimited(const std::vector<std::int32_t>& text);  // pairs: one side as one sample
  void emit(const std::int32_t* ids, const std::uint8_t* mask, std::size_t n);
  void flush_pending();

  shard_writer& writer_;
  packer_config config_;
  std::vector<std::int32_t> ids_;    // pending tokens
  std::vector<std::uint8_t> mask_;   // pending mask (SFT)
  std::size_t start_ = 0;            // pretrain pack: first pending token not yet emitted
  bool in_doc_ = false;
  std::int64_t doc_dropped_ = 0;     // pretrain pad: tokens of the current document beyond seq_len
  std::int64_t records_ = 0;
  std::int64_t truncated_samples_ = 0;
  std::int64_t truncated_tokens_ = 0;
  std::int64_t truncated_target_samples_ = 0;
  std::int64_t truncated_target_tokens_ = 0;
  std::int64_t skipped_samples_ = 0;
};

}  // namespace cohort::core::data

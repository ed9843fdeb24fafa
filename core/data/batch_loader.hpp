// The engine's view of a dataset: fills one rank's micro-batches, step by step, as plain (B, T)
// buffers (no torch), and saves/restores its position as a step number (seek is O(1)).
// A decoder-only model reads micro_batch (one token stream and its loss mask); a seq2seq (T5)
// model reads seq2seq_batch (encoder input_ids and attention_mask, decoder labels) from a seq2seq
// data set. Both take their samples from the same sampler, so the global order, world-size
// invariance and seek() are the same for both.
// One loader per rank; not thread-safe (the dataset it reads is).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/data/dataset.hpp"
#include "core/data/sampler.hpp"

namespace cohort::core::data {

// The batches a model reads; the data set must be of the matching kind (the loader refuses it
// otherwise): decoder: pretrain or sft; seq2seq: seq2seq; pairs: pairs. With pairs the sampler
// draws pairs (the data set's samples / 2) and a micro-batch of B pairs is a micro_batch of 2B
// rows: the B chosen texts, then the B rejected ones in the same order (DeepSpeed-Chat's
// concatenation); its sample_ids are the B pair indices.
enum class batch_kind { decoder, seq2seq, pairs };

struct loader_options {
  batch_geometry geometry;
  std::int64_t rank = 0;
  std::uint64_t seed = 0;
  batch_kind kind = batch_kind::decoder;
};

// The label that cross-entropy ignores (PyTorch's and Hugging Face's ignore_index).
inline constexpr std::int64_t ignore_label = -100;

struct micro_batch {
  std::int64_t step = 0;
  std::int64_t micro = 0;       // 0 .. grad_accum-1
  std::int64_t batch_size = 0;  // B
  std::int64_t seq_len = 0;     // T
  std::vector<std::int64_t> sample_ids;  // (B)
  std::vector<std::int64_t> tokens;      // (B, T) row-major; padded with the dataset's pad_id
  std::vector<std::uint8_t> loss_mask;   // (B, T) 1 = the token is a label (HF: labels = tokens where 1, else -100)
  std::vector<std::int64_t> lengths;     // (B) real tokens per row
};

// One seq2seq micro-batch in Hugging Face's names, as a T5 forward takes it (the model shifts the
// labels right from decoder_start_token_id for its decoder input).
struct seq2seq_batch {
  std::int64_t step = 0;
  std::int64_t micro = 0;        // 0 .. grad_accum-1
  std::int64_t batch_size = 0;   // B
  std::int64_t source_len = 0;   // S: the data set's seq_len
  std::int64_t target_len = 0;   // T: the data set's target_len
  std::vector<std::int64_t> sample_ids;      // (B)
  std::vector<std::int64_t> input_ids;       // (B, S) row-major source ids, padded with the data set's pad_id
  std::vector<std::int64_t> attention_mask;  // (B, S) 1 on source ids, 0 on padding
  std::vector<std::int64_t> labels;          // (B, T) target ids, ignore_label (-100) on padding
  std::vector<std::int64_t> source_lengths;  // (B) source ids per row
  std::vector<std::int64_t> target_lengths;  // (B) target ids per row
};

class batch_loader {
 public:
  // Throws data_error naming the data set when its kind does not match options.kind.
  batch_loader(std::shared_ptr<const dataset> data, const loader_options& options);

  std::int64_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }
  std::int64_t step() const { return step_; }    // step of the next micro-batch
  std::int64_t micro() const { return micro_; }  // its index within the step
  void seek(std::int64_t step);                  // position = (step, micro-batch 0); O(1)

  // Fills `out` with the micro-batch at the current position, then advances to the next micro-batch
  // (after the last one of a step, to micro-batch 0 of the next step). Reuses out's buffers.
  void next(micro_batch& out);     // kind decoder or pairs
  void next(seq2seq_batch& out);   // kind seq2seq; same positions and advance

 private:
  std::vector<std::int64_t> take(batch_kind kind, std::int64_t& step, std::int64_t& micro);
  std::shared_ptr<const dataset> data_;
  loader_options options_;
  sampler sampler_;
  std::int64_t step_ = 0;
  std::int64_t micro_ = 0;
};

// Samples `samples` of seq2seq data set `data` as one batch of samples.size() rows (what next()
// fills for the sampler's samples; evaluation reads its own). Throws data_error as the data set's
// reads do.
void fill_seq2seq_batch(const dataset& data, std::vector<std::int64_t> samples, seq2seq_batch& out);

// Pairs `pairs` of pairs data set `data` as one micro_batch of 2 · pairs.size() rows of the data
// set's seq_len (chosen rows first, then rejected; padded with pad_id; no loss mask), as next()
// fills it for kind pairs. Throws data_error as the data set's reads do.
void fill_pairs_batch(const dataset& data, std::vector<std::int64_t> pairs, micro_batch& out);

}  // namespace cohort::core::data

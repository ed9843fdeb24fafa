// Builds a token-shard dataset from text or jsonl: a reader thread streams bounded chunks, workers
// tokenize them in parallel, the calling thread packs and writes them in input order (output never
// depends on the thread count). Memory is bounded by a fixed number of chunks in flight.
#pragma once

#include <cstdint>
#include <string>

#include "core/data/format.hpp"
#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::data {

struct build_options {
  std::string input;                // a .txt/.jsonl file or a directory of them
  std::string tokenizer_path;       // recorded in the manifest
  std::string template_text;        // SFT: "{question}\n{answer}"; the last field is the completion
  std::string field;                // pretraining jsonl: the text field
  std::string special_tokens_file;  // {"tokens": ["<USER>", ...]}
  // seq2seq (both or neither): each jsonl record's source (encoder) and target (decoder) text.
  // The source is fitted to seq_len, the target to target_len, each with the special tokens the
  // tokenizer's post-processor adds (tokenizer::post_process) counted in.
  std::string template_source;
  std::string template_target;
  std::int64_t target_len = 0;
  std::string over_long = "truncate";  // seq2seq, a text over its length: "truncate", "skip" or "error"
  // Reward-model pairs: each jsonl record's "chosen" and "rejected" texts (strings), each after
  // the record's "prompt" when it has one, become two samples (kind "pairs").
  bool pairs = false;
  std::string out_dir;
  std::int64_t seq_len = 0;         // seq2seq: the source length
  std::string layout;               // "pack", "pad" or "" (pretraining: pack, SFT: pad)
  int threads = 0;                  // tokenizer threads; 0 = hardware concurrency
  std::int64_t shard_tokens = 1LL << 27;
  std::size_t chunk_bytes = 1 << 18;
  bool progress = true;             // progress bar on stderr
};

struct build_report {
  manifest result;
  double seconds = 0;
  std::uint64_t input_bytes = 0;
};

// Adds the special tokens to `tok`, then builds. `tok.encode` is called from several threads at
// once. Throws data_error (bad options or input, naming file and line) or tokenizer_error.
build_report build_dataset(const build_options& options, tokenizer::tokenizer& tok);

}  // namespace cohort::core::data

// Writes a token-shard dataset sample by sample: shard files stream to disk with their checksums
// computed on the fly, a new shard starts once one holds shard_tokens tokens (source and target
// together for seq2seq), and finish() writes manifest.json last (so a crashed build never looks
// complete). Single-threaded.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/data/checksum.hpp"
#include "core/data/format.hpp"

namespace cohort::core::data {

struct shard_writer_options {
  int token_bytes = 2;               // 2 (uint16) or 4 (uint32)
  bool loss_mask = false;            // write .mask files
  bool target = false;               // seq2seq: write .target_tokens/.target_index (append_pair)
  std::int64_t vocab_size = 0;       // ids must be < vocab_size
  std::int64_t shard_tokens = 1LL << 27;  // tokens per shard before rolling over (128 Mi)
};

// Prepares `dir` for a new dataset: creates it, or empties one that holds only a previous dataset.
// Throws data_error if it holds anything else (so a typo never deletes user files).
void prepare_output_dir(const std::string& dir);

class shard_writer {
 public:
  shard_writer(std::string dir, const shard_writer_options& options);
  ~shard_writer();
  shard_writer(const shard_writer&) = delete;
  shard_writer& operator=(const shard_writer&) = delete;

  // Appends one sample: n ids and, when the dataset has a loss mask, n mask bytes (0/1).
  void append(const std::int32_t* ids, std::int64_t n, const std::uint8_t* loss_mask);
  // Appends one seq2seq sample: n source ids and m target ids (a data set with `target` only).
  void append_pair(const std::int32_t* source, std::int64_t n, const std::int32_t* target, std::int64_t m);
  std::int64_t samples() const { return samples_; }
  std::int64_t tokens() const { return tokens_; }
  std::int64_t loss_tokens() const { return loss_tokens_; }

  // Closes the last shard, fills shards/counts/token width (and, with `target`, the seq2seq target
  // counts and format version) into `m` and writes manifest.json.
  manifest finish(manifest m);

 private:
  struct output {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file{nullptr, &std::fclose};
    std::string path;
    xxh64_stream hash;
    std::uint64_t bytes = 0;
    void open(const std::string& p);
    void write(const void* data, std::size_t size);
    file_info close();
  };
  void open_shard();
  void close_shard();
  void check_open(std::int64_t n);
  void write_ids(output& out, const std::int32_t* ids, std::int64_t n);  // checked against vocab_size
  void end_sample(std::int64_t n);

  std::string dir_;
  shard_writer_options options_;
  std::vector<shard_info> shards_;
  bool shard_open_ = false;
  output tokens_out_, index_out_, mask_out_, target_tokens_out_, target_index_out_;
  std::int64_t shard_samples_ = 0;
  std::int64_t shard_tokens_ = 0;
  std::int64_t shard_target_tokens_ = 0;
  std::uint8_t mask_byte_ = 0;
  std::vector<std::uint8_t> buffer_;
  std::int64_t samples_ = 0;
  std::int64_t tokens_ = 0;
  std::int64_t loss_tokens_ = 0;
  std::int64_t target_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace cohort::core::data

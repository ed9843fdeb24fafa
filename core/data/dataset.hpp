// A token-shard dataset opened read-only through mmap. Opening reads manifest.json and checks each
// shard file's size against it (milliseconds, no checksums: see verify.hpp). Immutable after
// construction, so one instance may be read from many threads.
//
// Streamed mode (a shard_source, e.g. a data set in S3): opening reads only the manifest; a shard
// is fetched into the source's local cache (checked against the manifest's XXH64s) and mapped the
// first time a sample of it is read, and the least recently read shards are dropped whenever the
// mapped shards would exceed `cache_bytes`. Reads then take one lock (a fetch blocks the other
// readers); the samples and their order are the same as from a local copy.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/data/format.hpp"
#include "core/data/mapped_file.hpp"
#include "core/data/shard_source.hpp"

namespace cohort::core::data {

class dataset {
 public:
  // Throws data_error naming the file when the manifest is bad or a shard is missing/truncated.
  explicit dataset(const std::string& dir);
  // Streamed mode (see above). Throws data_error naming the source when its manifest is bad, and
  // when `cache_bytes` cannot hold the largest shard's files (naming both sizes).
  dataset(std::shared_ptr<shard_source> source, std::uint64_t cache_bytes);

  bool streamed() const { return source_ != nullptr; }
  std::uint64_t cached_bytes() const;   // streamed: bytes of the shards mapped now
  std::uint64_t shard_fetches() const;  // streamed: shards fetched so far (evicted ones count again)

  const manifest& info() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  std::int64_t size() const { return manifest_.samples; }
  std::int64_t seq_len() const { return manifest_.seq_len; }

  std::int64_t sample_length(std::int64_t i) const;
  // Copies at most `capacity` tokens of sample i into `tokens` and, when `loss_mask` is not null,
  // its loss mask (1 = label; all ones for datasets without a mask). Returns the count copied.
  // An id >= the manifest's vocab_size (a corrupt shard) throws data_error naming the .tokens file
  // and the id's offset in it.
  std::int64_t read_sample(std::int64_t i, std::int64_t* tokens, std::uint8_t* loss_mask,
                           std::int64_t capacity) const;
  std::vector<std::int64_t> sample_tokens(std::int64_t i) const;
  std::vector<std::uint8_t> sample_loss_mask(std::int64_t i) const;

  // A seq2seq data set (kind "seq2seq"): read_sample/sample_tokens give sample i's source
  // (encoder) ids, at most seq_len() of them; these its target (decoder label) ids, at most
  // target_len(). On other data sets is_seq2seq() is false and the target calls throw data_error.
  bool is_seq2seq() const { return manifest_.seq2seq.has_value(); }
  std::int64_t target_len() const;
  std::int64_t target_length(std::int64_t i) const;
  std::int64_t read_target(std::int64_t i, std::int64_t* tokens, std::int64_t capacity) const;
  std::vector<std::int64_t> target_tokens(std::int64_t i) const;

 private:
  struct shard {
    mapped_file tokens;
    mapped_file index;
    mapped_file mask;
    const std::uint64_t* offsets = nullptr;  // (samples + 1); null: not mapped (streamed mode)
    mapped_file target_tokens;               // seq2seq only
    mapped_file target_index;
    const std::uint64_t* target_offsets = nullptr;
  };
  struct location {
    const shard* s;
    const mapped_file* tokens;  // the stream's ids
    std::uint64_t begin;        // token offset within the shard
    std::uint64_t length;
  };
  location locate(std::int64_t i, bool target) const;
  void copy_ids_checked(const location& loc, std::int64_t i, std::int64_t* tokens, std::uint64_t n) const;
  void require_seq2seq() const;
  std::unique_lock<std::mutex> lock_if_streamed() const;
  void make_resident(std::size_t k) const;  // streamed mode, under mutex_
  shard map_shard(const std::string& dir, const shard_info& info) const;
  std::uint64_t shard_bytes(const shard_info& info) const;

  std::string dir_;
  manifest manifest_;
  // Streamed mode maps and unmaps shards on reads (under mutex_); otherwise fixed at construction.
  mutable std::vector<shard> shards_;
  std::vector<std::int64_t> first_sample_;  // (shards + 1) prefix sums of samples per shard
  std::shared_ptr<shard_source> source_;
  std::uint64_t cache_bytes_ = 0;
  mutable std::mutex mutex_;
  mutable std::list<std::size_t> resident_;  // mapped shards, most recently read first
  mutable std::uint64_t resident_bytes_ = 0;
  mutable std::uint64_t fetches_ = 0;
};

}  // namespace cohort::core::data

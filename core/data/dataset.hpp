// A token-shard dataset opened read-only through mmap. Opening reads manifest.json and checks each
// shard file's size against it (milliseconds, no checksums: see verify.hpp). Immutable after
// construction, so one instance may be read from many threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/format.hpp"
#include "core/data/mapped_file.hpp"

namespace cohort::core::data {

class dataset {
 public:
  // Throws data_error naming the file when the manifest is bad or a shard is missing/truncated.
  explicit dataset(const std::string& dir);

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

 private:
  struct shard {
    mapped_file tokens;
    mapped_file index;
    mapped_file mask;
    const std::uint64_t* offsets = nullptr;  // (samples + 1)
  };
  struct location {
    const shard* s;
    std::uint64_t begin;  // token offset within the shard
    std::uint64_t length;
  };
  location locate(std::int64_t i) const;

  std::string dir_;
  manifest manifest_;
  std::vector<shard> shards_;
  std::vector<std::int64_t> first_sample_;  // (shards + 1) prefix sums of samples per shard
};

}  // namespace cohort::core::data

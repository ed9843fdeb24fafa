// Where a data set's shards come from when they are not on local disk: a shard_source lists the
// data set (its manifest) and fetches one shard's files into a local directory on demand, checked
// against the manifest's sizes and XXH64s, or drops them again. dataset (in its streamed mode)
// calls it under its own lock, one call at a time.
#pragma once

#include <string>

#include "core/data/format.hpp"

namespace cohort::core::data {

class shard_source {
 public:
  virtual ~shard_source() = default;
  virtual std::string where() const = 0;  // the data set's location, for messages
  virtual manifest read_manifest() = 0;   // throws data_error naming the location
  // Makes the shard's files (shard_files: <name>.tokens, .index, .mask with a loss mask, and a
  // seq2seq set's .target_tokens and .target_index) present in the returned local directory with
  // the manifest's sizes and XXH64s. Throws data_error naming the remote file that is missing or
  // does not match.
  virtual std::string fetch(const shard_info& shard, bool has_loss_mask) = 0;
  virtual void drop(const shard_info& shard) = 0;  // deletes the local copies (best effort)
};

}  // namespace cohort::core::data

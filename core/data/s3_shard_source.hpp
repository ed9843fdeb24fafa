// A data set in S3 (s3://BUCKET/PREFIX holding manifest.json and the shard files, as `cohort-data
// build` writes them), fetched shard by shard into a local cache directory. Each fetched file is
// checked against the manifest's size and XXH64 before use (a cached file left by an earlier run
// is checked the same way and fetched again when it does not match).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/data/dataset.hpp"
#include "core/data/shard_source.hpp"
#include "core/storage/s3_client.hpp"

namespace cohort::core::data {

class s3_shard_source : public shard_source {
 public:
  // `cache_dir` is created when missing; it should be this reader's own (one per rank).
  s3_shard_source(std::shared_ptr<const storage::s3_client> client, storage::s3_url url, std::string cache_dir);

  std::string where() const override { return url_.text(); }
  manifest read_manifest() override;
  std::string fetch(const shard_info& shard, bool has_loss_mask) override;
  void drop(const shard_info& shard) override;

 private:
  std::shared_ptr<const storage::s3_client> client_;
  storage::s3_url url_;
  std::string cache_dir_;
};

// The data set at `location`: a directory (dataset(dir)), or "s3://BUCKET/PREFIX" streamed
// through `cache_dir` holding at most `cache_bytes` (S3 reached as
// s3_config_from_environment(endpoint)). Throws data_error, or std::invalid_argument for S3
// settings (credentials, endpoint) that cannot work.
std::shared_ptr<const dataset> open_dataset(const std::string& location, const std::string& endpoint,
                                            const std::string& cache_dir, std::uint64_t cache_bytes);

}  // namespace cohort::core::data

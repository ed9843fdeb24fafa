// Where a Hugging Face model directory's files are read from: a directory on local disk, or an S3
// prefix (a job's model.hf_dir "s3://BUCKET/PREFIX"). An S3 model is read where it lies: its small
// files (config.json, model.safetensors.index.json, the tokenizer and generation files) are copied
// into a local directory, and its safetensors files are read by byte range, header first, so that a
// rank fetches only the header and the slices it keeps, never a whole file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/model/weight_file.hpp"
#include "core/storage/s3_client.hpp"

namespace cohort::core::model {

struct hf_files {
  std::string dir;    // a local directory holding config.json, the index and the tokenizer files
  std::string where;  // what messages name: the directory, or s3://BUCKET/PREFIX
  // Opens the weight file `name` (model.safetensors, or a shard the index names); nullptr when the
  // model has no such file. Thread-safe.
  std::function<std::unique_ptr<weight_file>(const std::string& name)> open;
};

// A model directory on local disk: every file read in place.
hf_files local_hf_files(const std::string& dir);

// The model at `url`, through `client`: lists the prefix, copies every object directly under it
// (none in "subdirectories") into `cache_dir` (created when missing; one per reader is simplest,
// files are replaced by rename) except the weights: *.safetensors are opened by range, other weight
// formats (.bin, .pt, .pth, .h5, .msgpack, .ckpt, .gguf, .onnx) are not read. Checks: each copied
// file's length is its listed size; each ranged read gets exactly the bytes it asked for from the
// object version listed (If-Match with the listed ETag: an object replaced while a job loads is
// refused, named); a truncated safetensors object is refused by its header check, named. Answers
// 5xx and lost connections are retried as the client retries them (s3_client.hpp). S3 publishes no
// content hash a reader could check a range against, so there is no XXH64 check (data shards have
// one: their manifest records it). Throws model_error (io) naming the URL when the listing or a
// copy fails, and (bad_weights) when the prefix holds no config.json.
// A read of more than `range_bytes` is split into ranged GETs of that size, up to 8 at once (one
// stream from S3 carries far less than a host takes in).
hf_files fetch_hf_files(std::shared_ptr<const storage::s3_client> client, const storage::s3_url& url,
                        const std::string& cache_dir, std::uint64_t range_bytes = std::uint64_t{16} << 20);

// The model at `location` (a job's model.hf_dir: a local directory, or s3://BUCKET/PREFIX reached
// as s3_config_from_environment(s3_endpoint)) with its small files where `cache_dir` says
// (fetch_hf_files; unused for a local directory).
hf_files open_hf_files(const std::string& location, const std::string& s3_endpoint,
                       const std::string& cache_dir);

// config.json of the model at `location` as a JSON object (from S3: that one object, nothing
// else); `file` receives what was read (its path or URL). Throws model_error (bad_config) naming
// it when it cannot be read or is not JSON, std::invalid_argument for S3 settings that cannot work
// (no credentials, a bad endpoint).
nlohmann::json read_hf_config_json(const std::string& location, const std::string& s3_endpoint,
                                   std::string* file = nullptr);

}  // namespace cohort::core::model

// manifest.json of a checkpoint: format version, step, world size, every logical tensor with its
// full shape, dtype and sharding (which rank holds which flat element range, under which stored
// name), the size and XXH64 of every file, and the metrics/extra JSON the trainer gives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cohort::core::ckpt {

inline constexpr int manifest_format_version = 1;

// One rank's slice of a logical tensor: elements [offset, offset + length) of the logical
// tensor's flat (row-major) view are elements [key_offset, key_offset + length) of the stored
// tensor `key` in that rank's rank-NNNNN.safetensors. Slices of different ranks may overlap
// (replicated state); together they must cover the whole tensor.
struct shard_piece {
  int rank = 0;
  std::string key;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t key_offset = 0;
};

struct logical_tensor {
  std::string name;
  std::string dtype;                // safetensors spelling: F32, BF16, I64, U8, ...
  std::vector<std::int64_t> shape;  // the full, unsharded shape
  std::vector<shard_piece> pieces;  // sorted by offset
  std::uint64_t numel() const;
};

struct file_record {
  std::string name;  // relative to the checkpoint directory
  int rank = 0;
  std::uint64_t size = 0;
  std::uint64_t xxh64 = 0;
};

struct manifest {
  int format_version = manifest_format_version;
  std::uint64_t step = 0;
  int world_size = 0;
  std::vector<logical_tensor> tensors;  // sorted by name
  std::vector<file_record> files;       // sorted by name
  nlohmann::json metrics = nlohmann::json::object();  // e.g. {"loss": 2.1}; retention scores
  nlohmann::json extra = nlohmann::json::object();    // anything the engine records

  const logical_tensor* find(const std::string& name) const;
};

nlohmann::json manifest_to_json(const manifest& m);
// Validates every field (types, ranks below world size, pieces inside their tensor, full
// coverage, known dtypes). Throws ckpt_error(bad_manifest) naming `where` and the field.
manifest manifest_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace cohort::core::ckpt

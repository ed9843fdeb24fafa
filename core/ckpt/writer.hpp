// Writing a checkpoint: every rank writes its own tensor shard and small state
// (write_rank_shard) and reports what it wrote; once every rank has reported, one process
// (the trainer or rank 0) commits: manifest.json, then COMMITTED, each fsync'd and renamed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ckpt/manifest.hpp"

namespace cohort::core::ckpt {

// Which part of a logical tensor a stored tensor holds: elements [key_offset, key_offset +
// length) of the stored tensor are elements [offset, offset + length) of `tensor`'s flat view.
struct logical_slice {
  std::string tensor;
  std::vector<std::int64_t> full_shape;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t key_offset = 0;
};

// One tensor of a rank's shard file; `data` is borrowed for the duration of the write.
struct shard_tensor {
  std::string key;                  // name inside rank-NNNNN.safetensors
  std::string dtype;                // F32, BF16, I64, U8, ...
  std::vector<std::int64_t> shape;  // as stored
  const void* data = nullptr;
  std::size_t nbytes = 0;
  // Empty: the stored tensor is the whole logical tensor named `key`.
  std::vector<logical_slice> slices;
};

// The small per-rank state written to rank-NNNNN.json.
struct rank_state {
  std::uint64_t step = 0;
  nlohmann::json scheduler = nlohmann::json::object();  // LR scheduler state
  std::string rng;                                      // raw RNG state bytes (base64 in the file)
  nlohmann::json sampler = nlohmann::json::object();    // sampler position
  nlohmann::json extra = nlohmann::json::object();      // anything else the engine keeps
};

// One slice as reported by a rank, with the logical tensor's dtype and full shape.
struct reported_piece {
  std::string tensor;
  std::string dtype;
  std::vector<std::int64_t> full_shape;
  shard_piece piece;
};

// What a rank wrote; serialisable so it can travel to the committing process.
struct rank_report {
  int rank = 0;
  std::uint64_t step = 0;
  std::vector<file_record> files;
  std::vector<reported_piece> pieces;
};
nlohmann::json rank_report_to_json(const rank_report& r);
rank_report rank_report_from_json(const nlohmann::json& j);  // throws ckpt_error(bad_input)

// Writes <dir>/rank-NNNNN.safetensors and <dir>/rank-NNNNN.json (creating dir), fsyncs both
// and returns their sizes and XXH64s with the slices. Throws ckpt_error naming the file.
rank_report write_rank_shard(const std::string& dir, int rank, const std::vector<shard_tensor>& tensors,
                             const rank_state& state);

// Checks that ranks 0..world_size-1 each reported once for `step` and that their files are there
// with the reported sizes, merges the slices into logical tensors (dtype and shape must agree,
// slices must cover each tensor), writes manifest.json, then COMMITTED. Returns the manifest.
manifest commit_checkpoint(const std::string& dir, std::uint64_t step, int world_size,
                           const std::vector<rank_report>& reports,
                           const nlohmann::json& metrics = nlohmann::json::object(),
                           const nlohmann::json& extra = nlohmann::json::object());

}  // namespace cohort::core::ckpt

// Finding and checking checkpoints: listing committed ones, verifying one (COMMITTED, manifest,
// every file's size and XXH64), picking the newest valid one, and loading one rank's shard.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ckpt/manifest.hpp"
#include "core/ckpt/writer.hpp"

namespace cohort::core::model {
class safetensors_reader;
struct tensor_entry;
}

namespace cohort::core::ckpt {

struct checkpoint_info {
  std::uint64_t step = 0;
  std::string path;
  bool committed = false;
  std::uint64_t bytes = 0;  // total size of the files in the directory
};

// Every step-<N> directory under <run>/checkpoints, committed or not, sorted by step.
// An absent checkpoints directory gives an empty list.
std::vector<checkpoint_info> scan_checkpoints(const std::string& run_dir);
// Only those with COMMITTED, sorted by step.
std::vector<checkpoint_info> list_checkpoints(const std::string& run_dir);

// Reads COMMITTED and manifest.json and checks the manifest's XXH64 against COMMITTED.
// Throws ckpt_error(not_committed / bad_manifest / missing_file) naming the file.
manifest read_manifest(const std::string& ckpt_dir);

struct verify_result {
  std::vector<std::string> problems;  // each names the file and what is wrong; empty = valid
  std::optional<manifest> manifest_read;  // set when the manifest could be read
  bool ok() const { return problems.empty(); }
};
// Full check: COMMITTED, manifest, every listed file present with its size and XXH64, and each
// rank's slices in the manifest exactly those its shard file declares in its own header
// (read_shard_layout); a problem names the rank, the file and the tensor. A shard file written
// before layouts were recorded is checked for what its header does say: each slice's key
// present, with the tensor's dtype and long enough.
verify_result verify_checkpoint(const std::string& ckpt_dir);

struct rejected_checkpoint {
  std::string path;
  std::string reason;
  bool committed = false;  // false: an unfinished save (no COMMITTED); true: committed but damaged
};
struct latest_result {
  std::optional<checkpoint_info> checkpoint;  // the newest valid one, if any
  std::optional<manifest> manifest_read;
  std::vector<rejected_checkpoint> rejected;  // newer ones that failed, newest first
};
// Walks step directories newest first and returns the first that verifies, reporting each
// rejected one (uncommitted directories newer than it included) with its reason.
latest_result latest_valid(const std::string& run_dir);

// One rank's files of a checkpoint: the state from rank-NNNNN.json and its tensors.
// Reads with pread, so several threads may read tensors at once.
class rank_shard {
 public:
  rank_shard(std::unique_ptr<model::safetensors_reader> tensors, rank_state state);
  ~rank_shard();
  rank_shard(rank_shard&&) noexcept;
  rank_shard& operator=(rank_shard&&) noexcept;

  const rank_state& state() const { return state_; }
  std::vector<std::string> keys() const;
  std::uint64_t nbytes(const std::string& key) const;  // throws ckpt_error(bad_input) if absent
  void read(const std::string& key, void* dst) const;  // copies nbytes(key) bytes

 private:
  const model::tensor_entry& entry(const std::string& key) const;
  std::unique_ptr<model::safetensors_reader> tensors_;
  rank_state state_;
};

// Opens rank `rank`'s files of a checkpoint laid out by `m` (no checksum pass: verify first).
rank_shard load_rank_shard(const std::string& ckpt_dir, const manifest& m, int rank);
rank_state parse_rank_state(const std::string& text, const std::string& where);

}  // namespace cohort::core::ckpt

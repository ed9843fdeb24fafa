// Writing a checkpoint: every rank writes its own tensor shard and small state
// (write_rank_shard) and reports what it wrote; once every rank has reported, one process
// (the trainer or rank 0) commits: manifest.json, then COMMITTED, each fsync'd and renamed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ckpt/attempt_claim.hpp"
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

// Copies `n` bytes of a tensor, starting at byte `offset` of its stored form, into `out`.
using tensor_reader = std::function<void(std::uint64_t offset, void* out, std::size_t n)>;

// One tensor of a rank's shard file. Its bytes come from `data` (borrowed for the duration of the
// write) or, when `data` is null, from `read` (e.g. a device tensor or an offloaded host shard,
// copied a chunk at a time: the writer never holds a second copy of the tensor).
struct shard_tensor {
  std::string key;                  // name inside rank-NNNNN.safetensors
  std::string dtype;                // F32, BF16, I64, U8, ...
  std::vector<std::int64_t> shape;  // as stored
  const void* data = nullptr;
  std::size_t nbytes = 0;
  // Empty: the stored tensor is the whole logical tensor named `key`.
  std::vector<logical_slice> slices;
  tensor_reader read{};
};

// How write_rank_shard moves the bytes: `read` sources are copied through one buffer of at most
// chunk_bytes, and on_bytes(n) is called after every n bytes of tensor data reach the file (the
// heartbeat's progress).
struct write_options {
  std::size_t chunk_bytes = std::size_t{64} << 20;
  std::function<void(std::uint64_t)> on_bytes{};
};

// A transfer's progress as it moves bytes (an upload of a rank's files, a download of a step, an
// export's upload): `done` of `total` bytes so far in that transfer, first (0, total), last
// (total, total). Transfers that move nothing (a location on disk) do not call it.
using transfer_progress = std::function<void(std::uint64_t done, std::uint64_t total)>;

// The tensor bytes a shard of `tensors` holds.
std::uint64_t shard_bytes(const std::vector<shard_tensor>& tensors);

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

// The __metadata__ entry of a rank's shard file in which write_rank_shard records the file's own
// slice layout: JSON {"rank", "step", "slices": [{"key", "tensor", "full_shape", "offset",
// "length", "key_offset"}, ...]}. It binds a rank's report to what the rank wrote: the committer
// and verify compare the report (the manifest) with it.
inline constexpr const char* layout_metadata_key = "cohort.layout";

// Writes <dir>/rank-NNNNN.safetensors (its slice layout in its header, see above) and
// <dir>/rank-NNNNN.json (creating dir), fsyncs both and returns their sizes and XXH64s with the
// slices. Streams: beside the caller's tensors it holds at most one chunk (write_options). Throws
// ckpt_error naming the file.
rank_report write_rank_shard(const std::string& dir, int rank, const std::vector<shard_tensor>& tensors,
                             const rank_state& state, const write_options& options = {});

// The slice layout a rank's shard file declares in its header (layout_metadata_key), each piece's
// dtype taken from the header's entry for its stored key. Checks the layout against the file:
// rank and step as given, every key stored there, every slice inside its stored tensor and its
// logical tensor. Throws ckpt_error (bad_manifest, or missing_file / io when the file cannot be
// read) naming the file, and the tensor where one is at fault. nullopt when the header carries
// no layout (a file written before layouts were recorded).
std::optional<std::vector<reported_piece>> read_shard_layout(const std::string& shard_path, int rank,
                                                             std::uint64_t step);

// Compares what a rank reported (or the manifest says) it holds with the layout its shard file
// declares; returns one line per disagreement, each naming the rank, the file and the tensor
// (empty: they agree). Pieces are compared as sets of (tensor, dtype, full shape, key, offset,
// length, key offset).
std::vector<std::string> compare_layout(const std::vector<reported_piece>& reported,
                                        const std::vector<reported_piece>& declared, int rank,
                                        const std::string& shard_path);

// The checks and the merge of commit_checkpoint, with no file written: ranks 0..world_size-1
// each reported once for `step`, with their shard and state files; `check_rank(report)` checks
// where the files are that they hold what the report says (throws otherwise); the slices merge
// into logical tensors (dtype and shape must agree, slices must cover each tensor). Returns the
// validated manifest. `where` names the checkpoint in errors (ckpt_error bad_input).
manifest merge_reports(const std::string& where, std::uint64_t step, int world_size,
                       const std::vector<rank_report>& reports, const nlohmann::json& metrics,
                       const nlohmann::json& extra, const std::function<void(const rank_report&)>& check_rank);
// Checks one rank's files in `dir` against its report: each present with its reported size, and
// the shard's declared layout (read_shard_layout) exactly the reported slices. Throws ckpt_error
// (missing_file, truncated, bad_input) naming the file, the rank and the tensor.
void check_rank_files(const std::string& dir, std::uint64_t step, const rank_report& report);
// COMMITTED's text: the step, manifest.json's XXH64 and, with a token, the committing attempt.
std::string committed_marker(std::uint64_t step, const std::string& manifest_text, const attempt_token* token);

// Checks that ranks 0..world_size-1 each reported once for `step` and that their files are there
// with the reported sizes, that each report's slices are exactly those its rank's shard file
// declares in its header (read_shard_layout), merges the slices into logical tensors (dtype and
// shape must agree, slices must cover each tensor), writes manifest.json, then COMMITTED.
// Returns the manifest. A report that disagrees with its file is refused with ckpt_error
// (bad_input) naming the rank, the file and the tensor; nothing is committed then.
// `token` (optional): the committing attempt (attempt_claim.hpp), whose run directory is `dir`'s
// grandparent (<run>/checkpoints/step-N). Checked just before manifest.json and again just
// before COMMITTED is written, and recorded in COMMITTED: a zombie attempt's commit is refused
// with ckpt_error(stale_attempt) and leaves the step uncommitted.
manifest commit_checkpoint(const std::string& dir, std::uint64_t step, int world_size,
                           const std::vector<rank_report>& reports,
                           const nlohmann::json& metrics = nlohmann::json::object(),
                           const nlohmann::json& extra = nlohmann::json::object(),
                           const attempt_token* token = nullptr);

}  // namespace cohort::core::ckpt

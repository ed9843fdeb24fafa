// Checkpoints in S3: a run at s3://BUCKET/PREFIX holds the same files as a run directory, under
// the same names (PREFIX/checkpoints/step-<N>/{rank-*.safetensors, rank-*.json, manifest.json,
// COMMITTED}, PREFIX/attempts/<job>.<attempt>), with the same commit protocol:
// - each rank writes its files to a local staging directory as on disk (write_rank_shard), then
//   uploads them (upload_rank_files): the shard as a multipart upload whose parts are each
//   acknowledged, completed only after the last; an upload cut off leaves no object;
// - once every rank reported, the committer checks each reported object's size (HEAD), writes
//   manifest.json, then COMMITTED, last (commit_checkpoint_s3). S3 makes each object appear
//   whole or not at all, so COMMITTED exists only after everything it vouches for;
// - readers treat a step without COMMITTED as not a checkpoint. A committed one is read by
//   downloading it into a local cache directory (download_checkpoint_s3, COMMITTED last) and
//   verifying the copy there (verify_checkpoint: every file's size and XXH64, the layouts);
//   load_rank_shard and export_hf then read the copy. A rank that resumes with the step's own
//   world size downloads only its own files and checks those (checkpoint_location::fetch).
// - retention deletes a committed step's COMMITTED first, then its other objects, so a step is
//   never committed but partial.
// Every function may be called from any thread (the client is thread-safe); errors are
// ckpt_error naming the s3:// location, with S3's error code in the message.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ckpt/attempt_claim.hpp"
#include "core/ckpt/manifest.hpp"
#include "core/ckpt/reader.hpp"
#include "core/ckpt/retention.hpp"
#include "core/ckpt/writer.hpp"
#include "core/storage/s3_client.hpp"

namespace cohort::core::ckpt {

inline constexpr std::uint64_t s3_default_part_size = 8ull << 20;

// A run's location in S3 and the client that reaches it.
struct s3_run {
  const storage::s3_client* client = nullptr;
  storage::s3_url url;  // the run: s3://BUCKET/PREFIX (PREFIX = <storage_path prefix>/<name>)
};

// "s3://BUCKET/PREFIX/checkpoints/step-<N>" (checkpoint_info::path of S3 listings).
std::string s3_step_url(const s3_run& run, std::uint64_t step);

// Uploads the files `report` lists from `local_step_dir` to the step's prefix, after checking
// that they are what the report says (check_rank_files: the committer trusts the report for the
// layout). Files larger than `part_size` go as multipart uploads; `after_part(file, n)`
// (optional) runs after part n of a file was acknowledged: a test throws from it to stand for a
// crash mid-upload. `progress` (optional) counts the acknowledged bytes of every file. Throws
// ckpt_error(io) naming the object.
void upload_rank_files(const s3_run& run, const std::string& local_step_dir, const rank_report& report,
                       std::uint64_t part_size = s3_default_part_size,
                       const std::function<void(const std::string&, int)>& after_part = {},
                       const transfer_progress& progress = {});

// The committer: merge_reports with every reported object checked by HEAD (present, reported
// size), then manifest.json, then COMMITTED, with the attempt claim (token, optional) checked
// before each as commit_checkpoint does. Returns the manifest.
manifest commit_checkpoint_s3(const s3_run& run, std::uint64_t step, int world_size,
                              const std::vector<rank_report>& reports,
                              const nlohmann::json& metrics = nlohmann::json::object(),
                              const nlohmann::json& extra = nlohmann::json::object(),
                              const attempt_token* token = nullptr);

// Every step under PREFIX/checkpoints/, committed or not, sorted by step (path: s3_step_url).
std::vector<checkpoint_info> scan_checkpoints_s3(const s3_run& run);

// Which of a committed step's files a reader wants, given the step's manifest.
using wanted_file = std::function<bool(const manifest& m, const file_record& f)>;

// Replaces `local_dir` with a copy of step `step`'s objects, COMMITTED written last (a copy cut
// off has none); with `wanted`, only manifest.json (downloaded first), the files of its list that
// `wanted` takes, and COMMITTED. Throws ckpt_error(not_committed) for a step without COMMITTED.
// `progress` (optional) counts the bytes written into the copy, of the objects' sizes.
void download_checkpoint_s3(const s3_run& run, std::uint64_t step, const std::string& local_dir,
                            const transfer_progress& progress = {}, const wanted_file& wanted = {});

// Uploads the regular files of the local directory `dir` to PREFIX/<name>/ (an export made the
// run's), each as upload_file does with `part_size`; `progress` (optional) counts the acknowledged
// bytes. Returns the URL of PREFIX/<name>.
std::string upload_directory_s3(const s3_run& run, const std::string& dir, const std::string& name,
                                const transfer_progress& progress = {},
                                std::uint64_t part_size = s3_default_part_size);

// latest_valid for S3: newest first, a step without COMMITTED is rejected as never completed; a
// committed one is downloaded to <cache_run_dir>/checkpoints/step-<N> and verified there. The
// result's checkpoint->path is that local copy (ready for load_rank_shard); rejected paths are
// s3:// URLs.
latest_result latest_valid_s3(const s3_run& run, const std::string& cache_run_dir);

// apply_retention for S3 (same policy; scores read from the manifests in S3). The result's
// removed_incomplete holds s3:// URLs.
retention_result apply_retention_s3(const s3_run& run, const retention_policy& policy);

// Deletes step `step`'s COMMITTED (a committed checkpoint found damaged: S3 has no rename to move
// it aside), so that it is an unfinished save that retention removes.
void uncommit_checkpoint_s3(const s3_run& run, std::uint64_t step);

// attempt_claim.hpp's claims, as objects PREFIX/attempts/<job_id>.<attempt>.
void claim_checkpoints_s3(const s3_run& run, const attempt_token& token);
void check_claim_s3(const s3_run& run, const attempt_token& token, const std::string& what);

}  // namespace cohort::core::ckpt

// Where a run's checkpoints are kept, one interface over two places: a run directory on disk
// (local_checkpoints) and a run in S3 (s3_checkpoints). A rank's checkpointer holds one, chosen
// when the attempt starts, and never asks which it is. The commit protocol is the same in both
// (writer.hpp, s3_checkpoints.hpp): each rank writes its files into a local step directory
// (write_rank_shard) and publishes them; once every rank reported, the committer commits
// (manifest.json, then COMMITTED, last); readers see only committed steps, and read a local copy.
//
// Threads: a location serves one rank; its calls may come from the rank's thread and from its
// background writer (publish, commit, retain), one at a time from each. Implementations keep no
// state that two such calls share besides the storage itself (the S3 client is thread-safe).
// Errors are ckpt_error naming the directory or s3:// URL.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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

// A rank that resumes from a committed step: rank `rank` of a group of `world_size`. With the
// step's own world size it reads only its own shard and state (the sharding is the same);
// with another it reads pieces of every rank's (a reshard).
struct resuming_rank {
  int rank = 0;
  int world_size = 1;
  // Whether this rank reads file `f` of step `m`.
  bool reads(const manifest& m, const file_record& f) const {
    return m.world_size != world_size || f.rank == rank;
  }
};

class checkpoint_location {
 public:
  virtual ~checkpoint_location() = default;

  // What messages name: "<run>/checkpoints" or "s3://BUCKET/PREFIX/checkpoints", and one step's
  // directory or URL.
  virtual std::string where() const = 0;
  virtual std::string step_name(std::uint64_t step) const = 0;

  // From now on only attempt `token` commits this run's checkpoints (attempt_claim.hpp): an older
  // attempt's commit is refused with ckpt_error(stale_attempt).
  virtual void claim(const attempt_token& token) = 0;
  // The committed checkpoints, by step.
  virtual std::vector<checkpoint_info> committed() const = 0;
  // latest_valid: the newest committed checkpoint that verifies, its path a local directory to
  // read (from S3: its verified copy in this rank's cache), and the newer ones rejected with their
  // reasons (their paths as where() names them).
  virtual latest_result latest_valid() = 0;
  // Puts committed checkpoint `r`, found damaged, out of the way of the step written again (on
  // disk renamed aside and kept for inspection; in S3, which has no rename, its COMMITTED deleted so
  // that retention removes it) and says what it did, for the log.
  virtual std::string set_aside(const rejected_checkpoint& r) = 0;
  // Committed step `step` as a local directory this rank reads: on disk the step's own directory;
  // from S3 a copy downloaded into this rank's cache and checked (ckpt_error naming the step when
  // it does not verify): the whole step, verified (verify_checkpoint); for `resuming`, only the
  // files that rank reads, with the manifest and COMMITTED, each checked against the manifest's
  // size and XXH64. `progress` (may be empty) counts the bytes downloaded.
  virtual std::string fetch(std::uint64_t step, const std::optional<resuming_rank>& resuming,
                            const transfer_progress& progress) = 0;

  // Makes the files `report` lists in the local step directory `dir` part of the location (in S3:
  // uploaded, then removed locally). `progress` (may be empty) counts the bytes uploaded.
  virtual void publish(const std::string& dir, const rank_report& report,
                       const transfer_progress& progress) = 0;
  // The committer's commit of step `step` (commit_checkpoint / commit_checkpoint_s3), `dir` being
  // its local step directory. Returns the manifest.
  virtual manifest commit(const std::string& dir, std::uint64_t step, int world_size,
                          const std::vector<rank_report>& reports, const nlohmann::json& metrics,
                          const nlohmann::json& extra, const attempt_token* token) = 0;
  // The committed step's files as a directory on this machine, for what reads them right after
  // the commit (an HF export); nullopt when they are elsewhere (S3).
  virtual std::optional<std::string> local_copy(std::uint64_t step) const = 0;
  // apply_retention / apply_retention_s3 with `policy`.
  virtual retention_result retain(const retention_policy& policy) = 0;

  // A Hugging Face export written into `dir`, the run's directory `name` (model/, adapter/), made
  // the run's: on disk it already is; to S3 its files are uploaded to <run>/<name>/, `progress`
  // (may be empty) counting their bytes. Returns where a user finds it, for the log.
  virtual std::string publish_export(const std::string& dir, const std::string& name,
                                     const transfer_progress& progress) = 0;
};

// The checkpoints of the run directory `run_dir` (<run_dir>/checkpoints/step-<N>).
std::unique_ptr<checkpoint_location> local_checkpoints(std::string run_dir);

// The checkpoints of the run `run` (s3://BUCKET/PREFIX) reached through `client`; this rank's
// downloaded copies go under `cache_dir`, which is emptied now (an earlier attempt's copies).
std::unique_ptr<checkpoint_location> s3_checkpoints(std::unique_ptr<storage::s3_client> client,
                                                    storage::s3_url run, std::string cache_dir);

}  // namespace cohort::core::ckpt

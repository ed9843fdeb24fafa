// A job's checkpoints as one rank of it takes part: choosing where to resume (rank 0 walks the
// committed checkpoints and tells the others through the attempt's store), saving this rank's
// part (optionally in the background) and reporting it through the store, and, on rank 0,
// committing once every rank reported and applying retention. One per rank per attempt; used by
// the rank's thread (the commit runs on the writer's thread).
//
// Where the checkpoints are kept is a checkpoint_location chosen once: the run directory, or the
// run in S3 (ctx.remote_run), where each rank writes its files into its local run directory as on
// disk, uploads them (s3_checkpoints.hpp) and removes its local copies before it reports; rank 0
// commits in S3 once every rank reported. On resume from S3 every rank downloads the chosen
// checkpoint into its own cache, <run_dir>/s3-cache/rank-<N>, verifies it there and reads it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ckpt/async_writer.hpp"
#include "core/ckpt/checkpoint_location.hpp"
#include "core/ckpt/manifest.hpp"
#include "core/ckpt/replica.hpp"
#include "core/ckpt/retention.hpp"
#include "core/train/emergency_save.hpp"
#include "core/train/workload.hpp"

namespace cohort::core::comm {
class store;
}

namespace cohort::core::train {

class peer_replicas;

// The run's checkpoints (ctx.run_dir, or the run in S3, ctx.remote_run, whose copies this process
// downloads go under `cache_dir`). Throws bad_input_error naming run.storage_path for S3 settings
// that cannot work.
std::unique_ptr<ckpt::checkpoint_location> open_checkpoints(const worker_context& ctx,
                                                            const std::string& cache_dir);

struct resume_point {
  std::string dir;
  ckpt::manifest manifest;
};

class checkpointer {
 public:
  // Connects to the attempt's store (ctx.store_address) for reports and the resume choice.
  explicit checkpointer(const worker_context& ctx);
  ~checkpointer();  // abandons a commit still waiting for reports, then joins the writer
  checkpointer(const checkpointer&) = delete;
  checkpointer& operator=(const checkpointer&) = delete;

  // Where this attempt continues from (the same answer on every rank), or nullopt to start
  // fresh. Resumes on a restarted attempt, and on a first attempt unless run.resume is false;
  // a first attempt with resume false refuses a run directory that holds committed checkpoints.
  // Rank 0 logs each rejected checkpoint with its reason and removes dead attempts' incomplete
  // directories.
  std::optional<resume_point> choose_resume();

  bool due(std::int64_t step, std::int64_t total_steps) const;  // every_steps, and the last step (final)
  // Whether step `step`, not a save, is a replica step (run.checkpoint.replicate_every).
  bool replica_due(std::int64_t step) const;
  // Collective, at a replica step: this rank's part of step `step`'s checkpoint (as save() takes
  // it, with the step's `metrics` and `extra`) kept as a peer replica only, nothing written to
  // storage (save() keeps its replicas through it too). Returns once the step's replica is complete
  // on every rank's node.
  void replicate(std::uint64_t step, const std::vector<ckpt::shard_tensor>& tensors,
                 const ckpt::rank_state& state, const nlohmann::json& metrics, const nlohmann::json& extra);
  // Rank 0: whether a checkpoint was requested (submit checkpoint, or a preemption) since it last
  // looked: ctx.signals->checkpoint_requests rose. Other ranks (and no signals): false.
  bool take_request();
  // Rank 0: whether the attempt is being preempted (ctx.signals->preempted). Asked right after
  // take_request returned true: a preemption is marked before its request, so that request sees
  // it. Rank 0 passes the answer to the step's all-reduce (causal_lm_engine::request_checkpoint),
  // so every rank that saves the checkpoint learns it from the step's result.
  bool preempted() const;
  // Saves this rank's part of step `step`'s checkpoint. Rank 0 commits it with `metrics` (the
  // step's reported figures, for retention scores) and `extra` once every rank reported. The
  // tensors may read live state (engine_checkpoint.hpp): save() returns only once it no longer
  // needs them. With run.checkpoint.async and a shard of at most run.checkpoint.staging_bytes it
  // waits for the previous save, copies them and writes in the background; otherwise it streams
  // them to the file itself and returns once written (and, on rank 0, committed), its activity
  // (ctx.activity) saying "saving", with the bytes written, meanwhile. True when it writes in the
  // background.
  bool save(std::uint64_t step, std::vector<ckpt::shard_tensor> tensors, ckpt::rank_state state,
            const nlohmann::json& metrics, const nlohmann::json& extra);
  // Waits for the save in flight (rethrowing its error); on rank 0 it is committed then.
  void finish();
  // Logs, on the rank's thread, the commits the writer thread made since the last call.
  void log_commits();
  // Rank 0: called with each checkpoint's step, directory and recorded metrics once it is
  // committed (on disk, not S3), before retention, on the thread that committed it (the writer's
  // for an asynchronous save); what it returns is logged with the commit. A rank waiting for the
  // save shows it as exporting meanwhile.
  using commit_hook =
      std::function<std::string(std::uint64_t step, const std::string& dir, const nlohmann::json& metrics)>;
  void on_commit(commit_hook f) { on_commit_ = std::move(f); }
  // Rank 0: the newest checkpoint committed in this run so far, or restored from (0: none).
  std::int64_t committed_step() const { return committed_step_; }
  // Rank 0: what the newest committed checkpoint's save took on its slowest rank (recorded in its
  // manifest's extra "save", so a resumed attempt knows it too); nullopt when none was timed.
  std::optional<save_record> last_save() const;
  // The run ended: the job's peer replicas (run.checkpoint.replicate) leave this rank's node.
  void drop_replicas();

 private:
  // Every rank's JSON value under store key `prefix` + its rank, each waited for (a restart's
  // exchanges between the ranks).
  std::vector<nlohmann::json> every_rank(const std::string& prefix);
  // Every rank: the resume choice published under store key `name`, made by rank 0 (pick_resume).
  nlohmann::json agree_on_resume(const std::string& name, bool replica_steps);
  // Rank 0: {"dir": ...} or {} (fresh start). `replica_steps`: a replica step newer than the
  // committed checkpoints may be chosen (false once one could not be restored).
  nlohmann::json pick_resume(bool replica_steps);
  // Rank 0, with peer replicas on a restart: {"dir", "step", "peer": the restore plan's sources}
  // when the nodes' memory holds every rank's copy of the newest committed checkpoint, or (with
  // `replica_steps`, "replica": true) of a newer replica step, else {} having logged why storage
  // is read instead.
  nlohmann::json pick_peer_resume(bool replica_steps);
  // Rank 0: the newest replica step after committed step `after` (0: none) whose every rank's
  // copy some node of this attempt holds, as pick_peer_resume answers, or {} having logged why
  // each newer one is not used.
  nlohmann::json pick_replica_step(const std::vector<std::vector<ckpt::replica_record>>& held,
                                   std::uint64_t after);
  // Every rank, on the plan rank 0 chose: the copies moved, its own checked against the manifest
  // (storage's copy of its shard where it does not match).
  resume_point restore_from_peers(const nlohmann::json& choice);
  // Every rank, on a replica step rank 0 chose: the copies moved and each checked against the
  // replica's manifest; nullopt, the same on every rank, when some rank's copy cannot be used
  // (that rank's record is removed, so that no later attempt chooses it).
  std::optional<resume_point> restore_replica_step(const nlohmann::json& choice);
  ckpt::retention_policy policy(bool writer_running) const;
  void log(const std::string& line) const;
  // `seconds` and `bytes`: what this rank's save took (test_save_seconds_added included).
  void publish_and_commit(const ckpt::rank_report& report, const nlohmann::json& metrics,
                          const nlohmann::json& extra, double seconds, std::uint64_t bytes_written);
  std::string key(const std::string& name) const;
  ckpt::write_options write_options() const;  // the written bytes counted into ctx.activity

  const worker_context& ctx_;
  std::unique_ptr<ckpt::checkpoint_location> location_;  // the run directory, or the run in S3
  std::unique_ptr<comm::store> store_;
  std::unique_ptr<peer_replicas> replicas_;  // with run.checkpoint.replicate
  ckpt::async_rank_writer writer_;
  std::atomic<bool> abandoned_{false};
  std::optional<std::uint64_t> restored_step_;
  std::atomic<std::int64_t> committed_step_{0};
  std::int64_t requests_taken_ = 0;  // rank 0: the checkpoint requests taken so far
  bool replica_logged_ = false;      // the first save's replicas were logged
  bool claimed_ = false;             // rank 0 claimed the run's checkpoints for this attempt
  bool staging_note_logged_ = false;  // the shard was once too large for run.checkpoint.staging_bytes
  std::atomic<bool> committing_{false};  // rank 0's writer waits for the reports and commits (finish())
  commit_hook on_commit_;
  std::mutex notes_mutex_;
  std::vector<std::string> notes_;
  mutable std::mutex save_mutex_;  // last_save_: set by the committing thread, read by the rank's
  std::optional<save_record> last_save_;
};

}  // namespace cohort::core::train

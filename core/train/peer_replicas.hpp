// A rank's part in the peer replicas of run.checkpoint.replicate (core/ckpt/replica.hpp keeps the
// bookkeeping): at each replica step (every save, and every run.checkpoint.replicate_every steps)
// it writes its shard into its node's host memory and sends a copy to its buddy rank on another
// node, which keeps it there; at a restart it moves the copies the restore plan names to the
// ranks that need them. The bytes travel over a Gloo group of their own
// (host memory to host memory, on CPU and GPU jobs alike), never through the trainer or storage.
// One per rank per attempt, used on the rank's thread only; every rank calls save() for the same
// steps and gather() with the same plan (they are collective).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ckpt/writer.hpp"
#include "core/train/workload.hpp"

namespace cohort::core::comm {
class gloo_process_group;
class store;
}  // namespace cohort::core::comm

namespace cohort::core::train {

class peer_replicas {
 public:
  // `store`: the attempt's (the checkpointer's), through which ranks tell their nodes.
  peer_replicas(const worker_context& ctx, comm::store& store);
  ~peer_replicas();

  // The job's replica directory on this rank's node, and one step's within it.
  const std::string& dir() const { return dir_; }
  std::string step_dir(std::uint64_t step) const;

  // Collective: takes step `step`'s replica: this rank's shard (`tensors` and `state`, written as
  // write_rank_shard writes them to storage) and the copy it keeps for the rank whose buddy it is;
  // once every rank's are written (a barrier), the step's manifest (the ranks' reports merged,
  // with `metrics` and `extra`, as a commit records them) and the records that make the copies
  // count; then the node's other steps go (before the write instead without replicate_every).
  // Returns a line for the log.
  std::string save(std::uint64_t step, const std::vector<ckpt::shard_tensor>& tensors,
                   const ckpt::rank_state& state, const nlohmann::json& metrics, const nlohmann::json& extra);
  // What this rank's node holds, for the restore plan (ckpt::replica_record JSON, an array).
  nlohmann::json holdings() const;
  // Collective: for every rank r with sources[r] not r (and not -1), rank sources[r] sends r's
  // replica of `step` from its node to r, which keeps it on its own node. Returns the bytes this
  // rank received. Joins the replicas' group only when some copy moves.
  std::uint64_t gather(std::uint64_t step, const std::vector<int>& sources);
  // Removes the job's replicas from this rank's node: the run ended.
  void drop();

 private:
  comm::gloo_process_group& group();
  // The steps of save(): this rank's shard and the kept copy written; every rank's reports, once
  // all are written, merged into the step's manifest; the records.
  ckpt::rank_report write_copies(std::uint64_t step, const std::vector<ckpt::shard_tensor>& tensors,
                                 const ckpt::rank_state& state);
  ckpt::manifest merge_step(std::uint64_t step, const ckpt::rank_report& own, const nlohmann::json& metrics,
                            const nlohmann::json& extra);
  void write_records(const ckpt::manifest& m);
  // Every rank of the group here (a collective); a cancelled attempt's rank leaves instead.
  void barrier();
  // Sends the files of rank `shard_out`'s replica of `step` to rank `to` (-1: none) and receives
  // rank `shard_in`'s from rank `from` (-1: none) into this node's step directory; `channel` tells
  // transfers apart (both ends name the same). `whole`: the shard, the step's manifest and the
  // record (a restore's move of a complete replica); else the shard alone (a save's copy, recorded
  // by its keeper). Returns the bytes received.
  std::uint64_t transfer(std::uint64_t step, int shard_out, int to, int shard_in, int from,
                         std::uint64_t channel, bool whole);

  const worker_context& ctx_;
  comm::store& store_;
  std::string dir_;
  std::unique_ptr<comm::gloo_process_group> group_;
  std::string key_prefix_;  // the replicas group's keys in the store
  std::vector<int> buddy_;  // buddy_[r] keeps rank r's copy; empty: every rank on one node
  bool buddies_known_ = false;
  int kept_for_ = -1;  // the rank whose copy this rank keeps
  std::uint64_t transfers_ = 0;
};

}  // namespace cohort::core::train

// Peer replicas of checkpoint shards (run.checkpoint.replicate): the bookkeeping, without torch
// and without the network. A node keeps, in host memory (a directory on tmpfs, /dev/shm), the
// shards of the newest replica step its ranks took and the copies it holds for their buddies on
// other nodes. A replica step is taken at each checkpoint save and, with
// run.checkpoint.replicate_every, every that many steps between them (no storage written then).
// A restarted attempt of the same size restores from them: from the committed step it resumes
// from when they match that step's manifest, or from a newer replica step, validated against the
// replica's own manifest; else from storage.
//
// Layout of a job's replica directory (replica_dir): step-<N>/rank-<R>.safetensors and
// rank-<R>.json (as in a checkpoint), manifest.json (the step's manifest, merged from every
// rank's report as a commit merges them, with the step's metrics and extra) and
// rank-<R>.replica.json (the record, written last, once every rank's own copy and its buddy's
// are written: a replica without it is incomplete and ignored). The files outlive the rank
// processes (tmpfs), not the machine. Two ranks of one node share the directory; every rank
// takes the same steps. Without replicate_every a step first removes the other steps'
// directories (one step's replicas at most); with it the older step is removed only once the new
// one is complete on every node (at most one complete step and the one being written).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ckpt/manifest.hpp"

namespace cohort::core::ckpt {

// Where nodes keep replicas: $COHORT_REPLICA_DIR when set, else /dev/shm/cohort-replicas (host
// memory), else <TMPDIR or /tmp>/cohort-replicas.
std::string replica_root();
// The replica directory of the job `job_id` writing run `run_dir` on node `node`, under `root`:
// <root>/<node>/<job_id>-<hash of run_dir> (two clusters on one machine never share one).
std::string replica_dir(const std::string& root, const std::string& node, const std::string& job_id,
                        const std::string& run_dir);
std::string replica_step_dir(const std::string& dir, std::uint64_t step);  // <dir>/step-<N>
std::string replica_record_name(int rank);                                 // rank-<R>.replica.json

// Who keeps whose copy: buddy[r] is the rank that keeps rank r's copy, on another node than r's
// (node_of_rank[r]): r + k modulo the world size for the smallest k that puts every rank's buddy
// on another node, so each rank keeps exactly one copy. Empty when no such k exists (one node).
std::vector<int> choose_buddies(const std::vector<std::string>& node_of_rank);

// A complete replica a node holds: rank `rank`'s shard of step `step`, with its files' sizes and
// XXH64s as written.
struct replica_record {
  std::uint64_t step = 0;
  int rank = 0;
  int world_size = 0;
  std::vector<file_record> files;
};
nlohmann::json replica_record_to_json(const replica_record& r);
replica_record replica_record_from_json(const nlohmann::json& j);  // throws ckpt_error(bad_input)

// Records `r` in `dir` (step dir of r.step), atomically: from now on the replica counts.
void write_replica_record(const std::string& dir, const replica_record& r);
// The complete replicas under `dir` (a job's replica directory), by step and rank; an unreadable
// record is skipped.
std::vector<replica_record> scan_replicas(const std::string& dir);
// Removes every step directory under `dir` but steps `keep`'s and `keep_too`'s (all of them when
// both are 0).
void drop_replicas(const std::string& dir, std::uint64_t keep, std::uint64_t keep_too = 0);

// The manifest of the replica step in `step_dir`, written by rank `rank` (every rank of a node writes
// the same one, each through its own temporary name), and read back; reading throws ckpt_error
// naming the file.
void write_replica_manifest(const std::string& step_dir, const manifest& m, int rank);
manifest read_replica_manifest(const std::string& step_dir);

// The steps after `after` of which `held` (as for plan_sources) records a replica for a group of
// `world_size`, newest first: the replica steps a restart may resume from before the committed
// checkpoint `after` (0: none).
std::vector<std::uint64_t> replica_steps_after(const std::vector<std::vector<replica_record>>& held,
                                               std::uint64_t after, int world_size);

// Whether each file the manifest `m` lists for rank `rank` is in `dir` with the manifest's size
// and XXH64: "" when so, else the first that is not (missing or damaged), for the log.
std::string mismatched_files(const std::string& dir, const manifest& m, int rank);

// Whether rank `rank`'s replica in `step_dir` is the one checkpoint `m` committed: its record of
// m.step and m.world_size, and each file the manifest lists for the rank present with the
// manifest's size and XXH64. "" when it is; else why not (stale, missing, damaged), for the log.
std::string check_replica(const std::string& step_dir, const manifest& m, int rank);

// The restore plan: sources[r] is the rank whose node holds rank r's replica of `step` for a group
// of `world_size` (r itself when its own node holds it, else the lowest such rank), or -1 when no
// node of the group holds it. held[h] lists what rank h's node holds.
std::vector<int> plan_sources(const std::vector<std::vector<replica_record>>& held, std::uint64_t step,
                              int world_size);

}  // namespace cohort::core::ckpt

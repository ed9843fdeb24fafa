// Checkpoint retention: keep exactly n committed checkpoints (the newest, or the best by a
// metric stored in the manifest), never the newest or a protected one, and clean up the
// uncommitted directories of dead attempts.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace cohort::core::ckpt {

struct retention_policy {
  int num_to_keep = 0;          // 0: keep every committed checkpoint (only clean up)
  std::string score_attribute;  // empty: keep the newest; else a key of the manifest's "metrics"
  std::string score_order = "max";     // "max" or "min": which scores are best
  std::set<std::uint64_t> protect_steps;  // e.g. the checkpoint being restored
  bool writer_running = true;  // false: every uncommitted directory is dead and removed
};

struct retention_result {
  std::vector<std::uint64_t> kept;     // committed steps kept, ascending
  std::vector<std::uint64_t> deleted;  // committed steps deleted
  std::vector<std::string> removed_incomplete;  // uncommitted directories removed
};

struct checkpoint_info;
struct manifest;

// The parts of apply_retention that do not depend on where checkpoints are stored (a directory or
// S3). check_policy throws ckpt_error(bad_input) for a negative num_to_keep or an unknown
// score_order. remove_incomplete: whether the uncommitted checkpoint `c` of `all` is a dead
// attempt's leftover to remove. select_kept: the committed steps to keep (`committed` ascending;
// `score` gives a checkpoint's score_attribute, nullopt when it has none).
void check_policy(const retention_policy& policy);
bool remove_incomplete(const checkpoint_info& c, const std::vector<checkpoint_info>& all,
                       const retention_policy& policy);
std::set<std::uint64_t> select_kept(const std::vector<checkpoint_info>& committed, const retention_policy& policy,
                                    const std::function<std::optional<double>(const checkpoint_info&)>& score);
// The number `attribute` of the manifest's metrics; nullopt when absent or not a number.
std::optional<double> metric_of(const manifest& m, const std::string& attribute);

// Throws ckpt_error(bad_input) for a negative num_to_keep or an unknown score_order, and
// ckpt_error(io) naming the directory that could not be removed.
retention_result apply_retention(const std::string& run_dir, const retention_policy& policy);

}  // namespace cohort::core::ckpt

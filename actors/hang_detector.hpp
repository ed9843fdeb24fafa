// The trainer's hang detector, without CAF: which rank of an attempt is hung. Each rank reports
// progress (the step it reached) and heartbeats (the step again, and how long it has been
// waiting in a collective, if it is). A rank whose step has not advanced for its allowance
// (startup_timeout_s before its first step, hang_timeout_s after) is stalled. A rank is hung when
// it has gone silent (no heartbeat for hang_timeout_s once it was heard, whatever its step:
// stopped, frozen, wedged in the kernel; startup_timeout_s while its process starts) or when it
// is stalled and its fresh heartbeats (within two intervals) say it is not waiting in a
// collective (stuck in its own work). A stalled rank that waits in a collective is waiting on a
// hung peer and is never the one named. Heartbeats also carry what a rank does besides its steps
// (core/train/rank_activity.hpp): a rank saving a checkpoint or exporting the final model is judged
// by its written bytes instead of its step (hung when they do not advance for
// checkpoint_timeout_s); rank 0 waiting for a commit and a rank done with its run are not judged
// by progress at all (only by silence); while any rank saves, commits or exports, ranks waiting
// in a collective wait for it and none of them is named; back in training, a rank's step
// allowance starts again. Times are seconds on one monotonic clock, given by the caller. Not
// thread-safe: the trainer actor owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/train/rank_activity.hpp"

namespace cohort::actors {

struct hang_limits {
  double hang_timeout_s = 120;
  double startup_timeout_s = 600;
  double checkpoint_timeout_s = 600;
};

// How often a rank heartbeats for a hang timeout: four times within it, at most every 5 s and
// at least every 50 ms. Inline: cohort-worker, which links no actors, heartbeats by it too.
inline double heartbeat_interval_s(double hang_timeout_s) {
  return hang_timeout_s / 4 < 0.05 ? 0.05 : hang_timeout_s / 4 > 5.0 ? 5.0 : hang_timeout_s / 4;
}

// The rank found hung, and why (a sentence for `submit status`, naming node, rank, pid and the
// last step).
struct hang_verdict {
  std::int32_t rank = -1;
  std::string node;
  std::int64_t pid = 0;
  std::int64_t last_step = 0;
  double stalled_s = 0;  // since its step last advanced (or it started)
  bool silent = false;   // no heartbeat within its allowance
  std::string reason;
};

class hang_detector {
 public:
  // Every rank is judged from `now_s` on (its allowance starts then) until it finishes.
  hang_detector(std::vector<std::string> rank_nodes, hang_limits limits, double now_s);

  // The rank's process is up (its pid, for the verdict; 0 when unknown).
  void on_started(std::int32_t rank, std::int64_t pid);
  // The rank completed step `step` (1-based). A step that does not advance is only a sign of life.
  void on_progress(std::int32_t rank, std::int64_t step, double now_s);
  // The rank is alive at step `step`, waiting in a collective for `collective_wait_s` seconds
  // (nullopt: not waiting), doing `activity` besides its steps.
  void on_heartbeat(std::int32_t rank, std::int64_t step, std::optional<double> collective_wait_s,
                    double now_s, const core::train::activity_reading& activity = {});
  // The rank ended its run; it is judged no more.
  void on_finished(std::int32_t rank);
  // The attempt waits at run.hold_before_step (rank 0 reported the hold): its ranks make no
  // progress on purpose, so until release() only silence is judged (a held rank's process still
  // heartbeats); release() starts every rank's allowance for its next step again.
  void hold();
  void release(double now_s);

  // The hung rank at `now_s`, if any: silent ranks before busy ones, then the longest stalled,
  // then the lowest rank. When every stalled rank waits in a collective and has waited past the
  // hang allowance, the one that began waiting last is named (the others were waiting for it).
  std::optional<hang_verdict> check(double now_s) const;

  // Rank `failed` failed on its own (say its collective timed out): the peer that went silent
  // while it waited, if one did (no heartbeat for half the hang allowance or more), so that the
  // waiting rank is not the one blamed.
  std::optional<hang_verdict> silent_peer(std::int32_t failed, double now_s) const;

  // What the ranks do besides their steps, for `submit status`: the export, else the save of the
  // oldest checkpoint step being saved or committed, with the bytes of every rank at it summed
  // ("saving checkpoint step 20: 41.0 of 79.0 GB"); "" while they train.
  std::string activity() const;
  // Lines for the job's log, each once per phase: ranks that have saved, committed or exported for
  // longer than hang_timeout_s, which the step allowance would have named and this does not.
  std::vector<std::string> long_phases(double now_s);

 private:
  struct rank_view {
    std::int64_t pid = 0;
    std::int64_t step = 0;
    double advanced_s = 0;             // when the step last advanced (or the attempt began)
    double heard_s = 0;                // the last heartbeat or progress
    bool heard_any = false;            // a first heartbeat or progress arrived
    std::optional<double> waiting_since_s;  // when its current collective wait began
    bool finished = false;
    core::train::activity_reading activity;  // from its newest heartbeat
    double phase_since_s = 0;                // when its current phase began
    double bytes_advanced_s = 0;             // when its written bytes last rose (or the phase began)
    bool long_phase_told = false;            // long_phases named this phase already
  };
  bool busy_writing(const rank_view& r) const;  // saving or exporting: judged by its bytes
  void heard(rank_view& r, std::int64_t step, double now_s);
  double allowance(const rank_view& r) const;        // for its step to advance
  double silence_allowed(const rank_view& r) const;  // between heartbeats
  hang_verdict verdict(std::int32_t rank, double now_s, const std::string& why) const;
  hang_verdict write_verdict(std::int32_t rank, double now_s) const;  // a saving/exporting rank's

  std::vector<std::string> nodes_;
  hang_limits limits_;
  std::vector<rank_view> ranks_;
  bool held_ = false;
};

}  // namespace cohort::actors

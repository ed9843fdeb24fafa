// Whether a preempted attempt's emergency checkpoint can commit before the preemption's deadline:
// the estimate is the job's last save (the slowest rank's write of its newest checkpoint, as
// checkpointer records it) plus one step (the checkpoint is of the step after the notice). Rank 0
// asks before that step; the answer's line goes to the job's log and, when it does not save, to
// the head (step_report::no_emergency_save), which stops the attempt and keeps the last committed
// checkpoint. Plain functions, no torch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cohort::core::train {

// What one checkpoint's save took on its slowest rank: that rank's shard bytes and the seconds
// from the start of its save to its report (written, uploaded when in S3).
struct save_record {
  double seconds = 0;
  std::uint64_t bytes = 0;
  int rank = 0;
};

// The emergency checkpoint must end this long before the deadline.
constexpr double emergency_save_margin_s = 5;

struct emergency_save_plan {
  bool save = true;
  std::string why;  // "" when there is no deadline to weigh; else the numbers, for the log
};

// `deadline_ms` and `now_ms`: unix ms (deadline 0: none known, save as before). `step_seconds`:
// the last step's time (0: none yet). `kept_step`: the newest committed checkpoint (0: none),
// which the job resumes from when this one is not saved.
emergency_save_plan plan_emergency_save(const std::optional<save_record>& last, double step_seconds,
                                        std::int64_t deadline_ms, std::int64_t now_ms,
                                        std::int64_t kept_step);

}  // namespace cohort::core::train

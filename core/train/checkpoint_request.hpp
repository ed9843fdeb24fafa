// The rendezvous-store key through which a checkpoint is requested from a running attempt: the
// trainer sets it (submit checkpoint JOB → head → trainer), rank 0 takes it before a step and
// the whole group saves after that step. A preemption sets preempt_key first and then the request:
// the ranks that saved a requested checkpoint find the preempt key and wait, running no further
// step, until the attempt is stopped. Header-only, so actors/ needs no link to core/train.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::core::train {

inline std::string checkpoint_key_prefix(const std::string& job_id, std::int32_t attempt) {
  return job_id + "/attempt-" + std::to_string(attempt) + "/ckpt/";
}

inline std::string checkpoint_request_key(const std::string& job_id, std::int32_t attempt) {
  return checkpoint_key_prefix(job_id, attempt) + "request";
}

// Set (before the checkpoint request) when a node of the attempt is leaving.
inline std::string preempt_key(const std::string& job_id, std::int32_t attempt) {
  return checkpoint_key_prefix(job_id, attempt) + "preempt";
}

}  // namespace cohort::core::train

// The rendezvous-store keys of a running attempt's checkpoints (the resume choice and each rank's
// report of its saved part), under one prefix per attempt. Checkpoint requests and preemption no
// longer travel through the store: the trainer sends them to the worker processes (worker_command,
// actors/messages.hpp) and rank 0 reads them from worker_context::signals. Header-only.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::core::train {

inline std::string checkpoint_key_prefix(const std::string& job_id, std::int32_t attempt) {
  return job_id + "/attempt-" + std::to_string(attempt) + "/ckpt/";
}

}  // namespace cohort::core::train

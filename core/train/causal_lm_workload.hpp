// The causal_lm workload: runs causal_lm_engine (seq2seq_engine when model.hf_dir is a T5,
// is_t5_job) on this rank's group for the job's steps; rank 0 writes metrics.jsonl and reports
// each logged step.
#pragma once

#include "core/train/workload.hpp"

namespace cohort::core::train {

class causal_lm_workload final : public workload {
 public:
  void run(const worker_context& ctx) override;
};

}  // namespace cohort::core::train

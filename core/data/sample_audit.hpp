// The audit of run.sample_log: given what each rank logged (<run>/samples/rank-N.jsonl, lines
// {"attempt", "step", "samples"} in the order written), decides which lines survive and checks
// them against the sampler. A line for step k replaces the rank's lines for steps >= k (a resumed
// attempt redoes the steps after its checkpoint; what the dead attempt logged after that point
// was lost with it). The surviving lines must be steps 1..total_steps exactly, each rank's
// samples those the sampler gives it for that step, and together every epoch's samples distinct
// (each sample at most once per epoch; exactly once but for the partial batch each epoch drops).
// Torch-free; plain functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/sampler.hpp"

namespace cohort::core::data {

struct sample_log_line {
  int attempt = 0;
  std::int64_t step = 0;  // 1-based
  std::vector<std::int64_t> samples;
};

struct sample_audit_result {
  std::vector<std::string> errors;  // empty: the log is exactly the sampler's
  // Per rank, where each attempt after the first logged its first step: {attempt, step - 1},
  // the step it resumed after (0: from scratch).
  std::vector<std::vector<std::pair<int, std::int64_t>>> resumes;
  std::int64_t lines = 0;          // lines read, all ranks
  std::int64_t replaced = 0;       // lines a later attempt's line replaced
  bool ok() const { return errors.empty(); }
};

// Reads one rank's file; throws data_error naming the file and line when a line is not one.
std::vector<sample_log_line> read_sample_log(const std::string& path);

// logs[r]: rank r's lines in file order. Geometry and seed as the job ran (train.seed, world
// size, micro_batch_size, grad_accum); num_samples of the data set.
sample_audit_result audit_sample_logs(const std::vector<std::vector<sample_log_line>>& logs,
                                      std::int64_t num_samples, const batch_geometry& geometry,
                                      std::uint64_t seed, std::int64_t total_steps);

}  // namespace cohort::core::data

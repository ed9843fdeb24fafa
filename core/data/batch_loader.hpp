// The engine's view of a dataset: fills one rank's micro-batches, step by step, as plain (B, T)
// buffers (no torch), and saves/restores its position as a step number (seek is O(1)).
// One loader per rank; not thread-safe (the dataset it reads is).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/data/dataset.hpp"
#include "core/data/sampler.hpp"

namespace cohort::core::data {

struct loader_options {
  batch_geometry geometry;
  std::int64_t rank = 0;
  std::uint64_t seed = 0;
};

struct micro_batch {
  std::int64_t step = 0;
  std::int64_t micro = 0;       // 0 .. grad_accum-1
  std::int64_t batch_size = 0;  // B
  std::int64_t seq_len = 0;     // T
  std::vector<std::int64_t> sample_ids;  // (B)
  std::vector<std::int64_t> tokens;      // (B, T) row-major; padded with the dataset's pad_id
  std::vector<std::uint8_t> loss_mask;   // (B, T) 1 = the token is a label (HF: labels = tokens where 1, else -100)
  std::vector<std::int64_t> lengths;     // (B) real tokens per row
};

class batch_loader {
 public:
  batch_loader(std::shared_ptr<const dataset> data, const loader_options& options);

  std::int64_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }
  std::int64_t step() const { return step_; }    // step of the next micro-batch
  std::int64_t micro() const { return micro_; }  // its index within the step
  void seek(std::int64_t step);                  // position = (step, micro-batch 0); O(1)

  // Fills `out` with the micro-batch at the current position, then advances to the next micro-batch
  // (after the last one of a step, to micro-batch 0 of the next step). Reuses out's buffers.
  void next(micro_batch& out);

 private:
  std::shared_ptr<const dataset> data_;
  loader_options options_;
  sampler sampler_;
  std::int64_t step_ = 0;
  std::int64_t micro_ = 0;
};

}  // namespace cohort::core::data

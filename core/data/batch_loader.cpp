// The engine's view of a dataset: one rank's micro-batches, step by step (see batch_loader.hpp).
#include "core/data/batch_loader.hpp"

#include <utility>
#include <string>

namespace cohort::core::data {
namespace {

std::int64_t checked_global_batch(const loader_options& o) {
  validate(o.geometry);
  if (o.rank < 0 || o.rank >= o.geometry.world_size)
    throw data_error("rank " + std::to_string(o.rank) + " outside [0, " + std::to_string(o.geometry.world_size) + ")");
  return o.geometry.global_batch();
}

}  // namespace

batch_loader::batch_loader(std::shared_ptr<const dataset> data, const loader_options& options)
    : data_(std::move(data)), options_(options), sampler_(data_->size(), checked_global_batch(options), options.seed) {}

void batch_loader::seek(std::int64_t step) {
  if (step < 0) throw data_error("cannot seek to step " + std::to_string(step) + " (must be >= 0)");
  step_ = step;
  micro_ = 0;
}

void batch_loader::next(micro_batch& out) {
  const auto& g = options_.geometry;
  const std::int64_t T = data_->seq_len();
  out.step = step_;
  out.micro = micro_;
  out.batch_size = g.micro_batch;
  out.seq_len = T;
  out.sample_ids = sampler_.micro_batch_samples(step_, g, options_.rank, micro_);
  out.tokens.assign(static_cast<std::size_t>(g.micro_batch * T), data_->info().pad_id);
  out.loss_mask.assign(static_cast<std::size_t>(g.micro_batch * T), 0);
  out.lengths.assign(static_cast<std::size_t>(g.micro_batch), 0);
  for (std::int64_t b = 0; b < g.micro_batch; ++b) {
    const auto row = static_cast<std::size_t>(b * T);
    out.lengths[static_cast<std::size_t>(b)] =
        data_->read_sample(out.sample_ids[static_cast<std::size_t>(b)], out.tokens.data() + row,
                           out.loss_mask.data() + row, T);
  }
  if (++micro_ == g.grad_accum) {
    micro_ = 0;
    ++step_;
  }
}

}  // namespace cohort::core::data

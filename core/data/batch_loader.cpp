// The engine's view of a dataset: one rank's micro-batches, step by step (see batch_loader.hpp).
#include "core/data/batch_loader.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace cohort::core::data {
namespace {

// The data set the loader reads must be of the kind its model reads.
void check_kind(const dataset& data, batch_kind kind) {
  const bool pairs = data.info().kind == "pairs";
  if (kind == batch_kind::pairs && !pairs)
    throw data_error(data.dir() + ": a \"" + data.info().kind +
                     "\" data set; a reward model (workload \"reward_model\") trains on pairs: build it with "
                     "`cohort-data build --pairs` from jsonl records with \"chosen\" and \"rejected\"");
  if (kind != batch_kind::pairs && pairs)
    throw data_error(data.dir() +
                     ": a pairs data set (chosen and rejected texts, built with --pairs) trains a "
                     "reward model: set workload \"reward_model\", or build a pretrain or sft data set");
  if (kind == batch_kind::decoder && data.is_seq2seq())
    throw data_error(data.dir() + ": a seq2seq data set (source and target ids, built with --template-source and "
                     "--template-target) cannot train a decoder-only model; build a pretrain or sft data set "
                     "(--field or --template) for it, or train a seq2seq (T5) model on this one");
  if (kind == batch_kind::seq2seq && !data.is_seq2seq())
    throw data_error(data.dir() + ": a \"" + data.info().kind +
                     "\" data set has one token stream; a seq2seq (T5) model needs source and target ids: build "
                     "it with `cohort-data build --template-source S --template-target T --source-len N "
                     "--target-len M`");
}

std::int64_t checked_global_batch(const loader_options& o) {
  validate(o.geometry);
  if (o.rank < 0 || o.rank >= o.geometry.world_size)
    throw data_error("rank " + std::to_string(o.rank) + " outside [0, " + std::to_string(o.geometry.world_size) + ")");
  return o.geometry.global_batch();
}

// What the sampler draws from: the data set's samples, or its pairs.
std::int64_t sampled_items(const dataset& data, batch_kind kind) {
  check_kind(data, kind);
  return kind == batch_kind::pairs ? data.size() / 2 : data.size();
}

}  // namespace

batch_loader::batch_loader(std::shared_ptr<const dataset> data, const loader_options& options)
    : data_(std::move(data)),
      options_(options),
      sampler_(sampled_items(*data_, options.kind), checked_global_batch(options), options.seed) {}

void batch_loader::seek(std::int64_t step) {
  if (step < 0) throw data_error("cannot seek to step " + std::to_string(step) + " (must be >= 0)");
  step_ = step;
  micro_ = 0;
}

// The samples of the current micro-batch; advances to the next one (after the last of a step, to
// micro-batch 0 of the next step).
std::vector<std::int64_t> batch_loader::take(batch_kind kind, std::int64_t& step, std::int64_t& micro) {
  if (kind != options_.kind) {
    const char* names[] = {"decoder", "seq2seq", "pairs"};
    throw data_error(std::string("batch_loader: this loader was made for ") +
                     names[static_cast<int>(options_.kind)] + " batches");
  }
  const auto& g = options_.geometry;
  step = step_;
  micro = micro_;
  auto samples = sampler_.micro_batch_samples(step_, g, options_.rank, micro_);
  if (++micro_ == g.grad_accum) {
    micro_ = 0;
    ++step_;
  }
  return samples;
}

void batch_loader::next(micro_batch& out) {
  const auto& g = options_.geometry;
  const std::int64_t T = data_->seq_len();
  if (options_.kind == batch_kind::pairs) {
    std::int64_t step = 0, micro = 0;
    fill_pairs_batch(*data_, take(batch_kind::pairs, step, micro), out);
    out.step = step;
    out.micro = micro;
    return;
  }
  out.sample_ids = take(batch_kind::decoder, out.step, out.micro);
  out.batch_size = g.micro_batch;
  out.seq_len = T;
  out.tokens.assign(static_cast<std::size_t>(g.micro_batch * T), data_->info().pad_id);
  out.loss_mask.assign(static_cast<std::size_t>(g.micro_batch * T), 0);
  out.lengths.assign(static_cast<std::size_t>(g.micro_batch), 0);
  for (std::int64_t b = 0; b < g.micro_batch; ++b) {
    const auto row = static_cast<std::size_t>(b * T);
    out.lengths[static_cast<std::size_t>(b)] =
        data_->read_sample(out.sample_ids[static_cast<std::size_t>(b)], out.tokens.data() + row,
                           out.loss_mask.data() + row, T);
  }
}

void batch_loader::next(seq2seq_batch& out) {
  auto samples = take(batch_kind::seq2seq, out.step, out.micro);
  fill_seq2seq_batch(*data_, std::move(samples), out);
}

void fill_seq2seq_batch(const dataset& data, std::vector<std::int64_t> samples, seq2seq_batch& out) {
  const auto B = static_cast<std::int64_t>(samples.size());
  const std::int64_t S = data.seq_len(), T = data.target_len();
  out.sample_ids = std::move(samples);
  out.batch_size = B;
  out.source_len = S;
  out.target_len = T;
  out.input_ids.assign(static_cast<std::size_t>(B * S), data.info().pad_id);
  out.attention_mask.assign(static_cast<std::size_t>(B * S), 0);
  out.labels.assign(static_cast<std::size_t>(B * T), ignore_label);
  out.source_lengths.assign(static_cast<std::size_t>(B), 0);
  out.target_lengths.assign(static_cast<std::size_t>(B), 0);
  for (std::int64_t b = 0; b < B; ++b) {
    const auto i = out.sample_ids[static_cast<std::size_t>(b)];
    const auto n = data.read_sample(i, out.input_ids.data() + b * S, nullptr, S);
    std::fill_n(out.attention_mask.begin() + b * S, n, 1);
    out.source_lengths[static_cast<std::size_t>(b)] = n;
    out.target_lengths[static_cast<std::size_t>(b)] = data.read_target(i, out.labels.data() + b * T, T);
  }
}

void fill_pairs_batch(const dataset& data, std::vector<std::int64_t> pairs, micro_batch& out) {
  const auto P = static_cast<std::int64_t>(pairs.size()), T = data.seq_len();
  out.sample_ids = std::move(pairs);
  out.batch_size = 2 * P;
  out.seq_len = T;
  out.tokens.assign(static_cast<std::size_t>(2 * P * T), data.info().pad_id);
  out.loss_mask.assign(static_cast<std::size_t>(2 * P * T), 0);
  out.lengths.assign(static_cast<std::size_t>(2 * P), 0);
  for (std::int64_t row = 0; row < 2 * P; ++row) {
    const auto pair = out.sample_ids[static_cast<std::size_t>(row % P)];
    const auto sample = 2 * pair + (row < P ? 0 : 1);  // chosen rows, then rejected
    const auto at = static_cast<std::size_t>(row * T);
    out.lengths[static_cast<std::size_t>(row)] =
        data.read_sample(sample, out.tokens.data() + at, out.loss_mask.data() + at, T);
  }
}

}  // namespace cohort::core::data

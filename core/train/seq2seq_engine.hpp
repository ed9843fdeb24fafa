// The training engine of a T5 (encoder-decoder) job on one rank of a data-parallel group: the
// training_engine's contract (training_engine.hpp) for a model.hf_dir whose config.json is
// a T5 and seq2seq data sets (batch_loader's seq2seq_batch: encoder input_ids and attention_mask,
// decoder labels with -100). The ZeRO optimizer takes the T5's weights in units (unit 0: the
// shared embedding, final norms, the relative-position tables and an untied head; unit 1 + i:
// encoder block i; unit 1 + L + j: decoder block j). Stages 0-2 run a step's forward and backward
// on the whole model. ZeRO-3 runs them one block at a time, as causal_lm_engine does its layers:
// unit 0 gathered for the step; each block's unit gathered for its forward (the next prefetched)
// and released after it, its graph kept; then, last block first, gathered again for its backward,
// its gradients reduce-scattered and released. The decoder's blocks read the encoder's output as
// one autograd leaf that sums their gradients of it for the encoder's backward. An evaluation runs
// the blocks likewise, without graphs. The loss and gradients are those of the mean over every
// label token of the global batch, so results do not depend on the world size. train.seq_len is
// not read: the data set's source and target lengths are the batches'. One per rank, used by one
// thread; no torch here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"
#include "core/comm/process_group.hpp"
#include "core/train/causal_lm_engine.hpp"

namespace cohort::core::train {

class seq2seq_engine final : public training_engine {
 public:
  // As causal_lm_engine's constructor; throws std::invalid_argument naming the field for a
  // data set that is not seq2seq or whose vocabulary exceeds the model's.
  seq2seq_engine(const config::job_spec& spec, comm::process_group& group,
                 const std::atomic<bool>* cancelled = nullptr, bool data_verified = false);
  ~seq2seq_engine() override;
  seq2seq_engine(const seq2seq_engine&) = delete;
  seq2seq_engine& operator=(const seq2seq_engine&) = delete;

  std::int64_t total_steps() const override;
  std::int64_t steps_done() const override;
  std::int64_t parameter_count() const override;
  std::int64_t global_batch() const override;
  // 6N + 12·(encoder + decoder blocks)·d_model·(source length): per source token.
  double flops_per_token() const override;
  double peak_flops() const override;
  // ZeRO-3: the most bytes of gathered weights this rank held at once during the last step
  // (zero_optimizer::gathered_peak_bytes): unit 0 and at most two blocks. 0 for stages 0-2.
  std::int64_t gathered_peak_bytes() const override;
  // Runs the next step (a collective). tokens: the global batch's real source and target ids.
  step_result train_step() override;
  bool has_eval() const override;
  // data.eval: rank r of W takes the samples r, r + W, ... in micro-batches of at most
  // train.micro_batch_size rows, without gradients and dropout; the loss is the sum over every
  // rank's label tokens divided by their count (one all-reduce).
  eval_result evaluate() override;
  void request_checkpoint(bool preempted = false) override;
  std::vector<float> full_weights() override;
  checkpoint_part checkpoint() override;
  // model_config (the T5's config.json), tokenizer_files, job_name, global_batch, zero_stage.
  nlohmann::json checkpoint_extra() const override;
  void restore(const std::string& dir, const ckpt::manifest& m) override;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace cohort::core::train

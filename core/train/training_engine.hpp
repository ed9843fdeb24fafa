// The contract every training engine keeps (causal_lm_engine for decoders, seq2seq_engine for a
// T5): one rank of a data-parallel group that owns the model, the ZeRO optimizer and the data
// position, and that the run loop (causal_lm_workload.cpp) drives step by step. Every method
// marked "a collective" must be called by every rank of the group, in the same order. One per
// rank, used by one thread. No torch here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ckpt/async_writer.hpp"
#include "core/ckpt/manifest.hpp"
#include "core/train/workload.hpp"

namespace cohort::core::train {

struct step_result {
  std::int64_t step = 0;    // 1-based step just completed
  double loss = 0;          // mean over the global batch's label tokens (0 if it has none)
  double lr = 0;            // the learning rate this step used
  double grad_norm = 0;     // global L2 norm before clipping
  std::int64_t tokens = 0;  // real (non-padding) tokens in the global batch
  double seconds = 0;
  // Host time of the update (clipping, AdamW, new weights), part of seconds: with optimizer
  // offload the host AdamW; on a GPU without offload mostly the kernels' launch.
  double optimizer_seconds = 0;
  // ZeRO-3 with offload_param: the host update runs on a thread of its own while the next step
  // computes (optimizer_seconds is then only its hand-over); its own time, that of the update
  // before this step's, the last one finished. 0 otherwise.
  double host_update_seconds = 0;
  bool checkpoint_requested = false;  // some rank called request_checkpoint() before this step
  bool preempted = false;             // and one of them with preempted: after saving, run no further step
  std::vector<std::int64_t> samples;  // the data set indices this rank consumed, in order
  // workload reward_model: over the global batch's pairs (loss and tokens count pairs' texts as
  // above: loss is the mean over pairs of −log σ(r_chosen − r_rejected)); samples are pair indices.
  std::optional<reward_metrics> reward;
};

// One evaluation of data.eval (training_engine::evaluate).
struct eval_result {
  double loss = 0;          // mean over every label token of the eval data set (0 if none)
  std::int64_t labels = 0;  // label tokens counted, over all ranks
  double seconds = 0;       // this rank's wall time of the evaluation
  // workload reward_model: over every pair of data.eval (loss: the mean pairwise loss, labels:
  // the pairs).
  std::optional<reward_metrics> reward;
};

// This rank's part of a checkpoint of the state after steps_done() steps: host copies of the
// master weights and AdamW moments it keeps (see engine_checkpoint.hpp), and its step, sampler
// position, LR schedule position and RNG state.
struct checkpoint_part {
  std::vector<ckpt::shard_tensor> tensors;  // reads the live state: save it before the next step
  ckpt::rank_state state;
};

class training_engine {
 public:
  virtual ~training_engine() = default;

  virtual std::int64_t total_steps() const = 0;  // train.max_steps, else epochs × steps per epoch
  virtual std::int64_t steps_done() const = 0;
  // The trained ones (LoRA: the adapters', and a grown vocabulary's embedding and head).
  virtual std::int64_t parameter_count() const = 0;
  virtual std::int64_t global_batch() const = 0;  // samples per step
  // FLOPs of one token's training step and the dense bf16 peak of this rank's GPU (0 on CPU or an
  // unknown card): the two sides of MFU (mfu.hpp).
  virtual double flops_per_token() const = 0;
  virtual double peak_flops() const = 0;
  // ZeRO-3: the most bytes of gathered compute-dtype weights this rank held at once during the
  // last step; 0 for stages 0-2, which hold whole weights.
  virtual std::int64_t gathered_peak_bytes() const = 0;
  // Runs the next step (a collective). Throws cancelled_error when cancelled.
  virtual step_result train_step() = 0;
  // Whether the spec names an eval data set (data.eval), opened and checked by the constructor.
  virtual bool has_eval() const = 0;
  // Evaluates the model as it is now on the whole eval data set (a collective), without gradients
  // and with dropout off; the loss is the sum over every rank's label tokens divided by their
  // count, so it does not depend on the world size. The weights, optimizer and data position are
  // untouched. Throws logic_error without data.eval, cancelled_error when cancelled.
  virtual eval_result evaluate() = 0;
  // Marks the next step's result checkpoint_requested (and, when `preempted`, preempted) on every
  // rank (it travels with the step's first all-reduce, so the group agrees without another
  // collective).
  virtual void request_checkpoint(bool preempted = false) = 0;
  // Every trained weight in fp32, flattened in hf_parameters() order (a collective).
  virtual std::vector<float> full_weights() = 0;
  virtual checkpoint_part checkpoint() = 0;
  // What every checkpoint's manifest records besides tensors: the model's config.json, the
  // global batch and the ZeRO stage (checked on restore, used by export), the tokenizer files and
  // the data set's added tokens with their ids.
  virtual nlohmann::json checkpoint_extra() const = 0;
  // Continues from committed checkpoint `dir` (manifest `m`) written by any world size with the
  // same global batch: weights, moments, step, sampler position and (same world size) RNG.
  // A collective. Throws std::invalid_argument naming the checkpoint and what does not match.
  virtual void restore(const std::string& dir, const ckpt::manifest& m) = 0;
  // A line for the log about train.cuda_graph on a GPU once steps run: that the step replays CUDA
  // graphs, or why they do not apply. Empty on a CPU, with the field false, before a graph is
  // captured, and for engines that capture none.
  virtual std::string step_graph_status() const { return {}; }
};

}  // namespace cohort::core::train

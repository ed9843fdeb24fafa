// What the training engines (causal_lm_engine, seq2seq_engine) share: a rank's compute device, the
// compute dtype of train.precision, its generators' seeds, the batch loader's options, the
// tokenizer files and added tokens an export carries, the checkpoint's vocabulary check, and the
// sums and update that end every step.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "config/job_spec.hpp"
#include "core/ckpt/manifest.hpp"
#include "core/comm/process_group.hpp"
#include "core/data/batch_loader.hpp"
#include "core/data/dataset.hpp"
#include "core/data/format.hpp"
#include "core/model/hf_files.hpp"
#include "core/train/causal_lm_engine.hpp"
#include "core/train/zero_optimizer.hpp"

namespace cohort::core::train {

// The CUDA device of `rank` with scaling.use_gpu (causal_lm_engine::cuda_device_for), else the
// CPU. Throws std::invalid_argument naming scaling.use_gpu when no CUDA device is visible.
torch::Device compute_device(const config::job_spec& spec, int rank);

// fp32 or bf16.
torch::ScalarType dtype_of(config::precision p);

// Before a rank builds its model: train.deterministic's settings (cuBLAS's workspace, torch's
// deterministic algorithms) and torch's generators seeded from train.seed, each rank its own
// stream (dropout draws from them; a restore sets them from the checkpoint).
void seed_rank(const config::train_spec& train, int rank);

// The batch loader's options of this rank: the group's geometry, train.seed, batches of `kind`.
data::loader_options loader_options_of(const config::train_spec& train, const comm::process_group& group,
                                       data::batch_kind kind);

// The ZeRO optimizer's options of the spec (zero.*, train.precision) on `device`.
zero_options zero_options_of(const config::job_spec& spec, const torch::Device& device);

// The tokenizer files an export of this job's model should carry (a JSON list of paths): those of
// the fine-tuned Hugging Face directory `model_dir` (hf_files::dir: local, a model in S3 has them
// copied there), else ("" ) the one the data set was built with and its HF companions.
nlohmann::json tokenizer_files(const std::string& model_dir, const data::manifest& data);

// Rank `rank`'s view of model.hf_dir (model::open_hf_files): the directory, or the model in S3,
// read by range, its small files copied into cohort-model-cache/BUCKET/PREFIX/rank-<rank> of the
// temp directory. Empty (no dir, no open) without model.hf_dir.
model::hf_files open_model_files(const config::job_spec& spec, int rank);

// Throws std::invalid_argument naming checkpoint `dir` when its model (extra.model_config) has
// another vocab_size than `vocab`, the job's (grown by model.added_tokens and
// model.pad_vocab_to_multiple_of, which must stay as they were to resume).
void check_checkpoint_vocab(const std::string& dir, const ckpt::manifest& m, std::int64_t vocab);

// A tensor's values on their way to the host. On a GPU: an asynchronous copy into pinned memory
// and an event after it, so that get() waits for the copy and not for work queued after it (the
// update after a step's figures). Elsewhere get() is the tensor on the host at once.
class host_read {
 public:
  explicit host_read(const torch::Tensor& t);
  torch::Tensor get();  // the values on the host (waits for the copy)

 private:
  torch::Tensor host_;
  std::shared_ptr<void> copied_;  // the CUDA event recorded after the copy, when on a GPU
};

// Waits on the host for everything queued on `device` (nothing on the CPU): finish_step returns
// before its update has run there, so what reads the optimizer's state from the host or from
// another thread (a checkpoint) waits for it first.
void wait_for_device(const torch::Device& device);

// `values` summed over the group's ranks (one fp64 all-reduce on `device`), on the host; a rank
// alone gets its own values without a collective. On CUDA the host waits for that collective
// only, not for the work queued on the compute stream.
torch::Tensor all_reduce_sum(comm::process_group& group, const torch::Device& device,
                             const std::atomic<bool>* cancelled, std::vector<double> values);

// total += sum (a 0-dim loss), in fp64 on sum's device: a micro-batch's loss added up without a
// host read.
void add_loss(torch::Tensor& total, const torch::Tensor& sum);

// The end of step `step_index` (0-based) once its gradients are reduced into the optimizer's
// shards and synchronised: the loss and the gradients' squares summed over ranks (one all-reduce),
// clipping to train.grad_clip, AdamW at the schedule's rate. `counts` is the step's first
// all-reduce (label tokens, tokens, checkpoint requested, preempted); `local_loss` this rank's
// summed loss, 0-dim on any device (add_loss). The result's samples are `samples`, its seconds
// counted from `started`. On a GPU the clipping coefficient is computed there and the host reads
// the loss and the norm once (host_read), their copy queued before the update: one wait per step
// at a single rank, and it returns while the update still runs on the device.
step_result finish_step(zero_optimizer& optimizer, const config::job_spec& spec, comm::process_group& group,
                        const torch::Device& device, const std::atomic<bool>* cancelled, std::int64_t step_index,
                        std::int64_t total_steps, const torch::Tensor& local_loss, const torch::Tensor& counts,
                        std::vector<std::int64_t> samples, std::chrono::steady_clock::time_point started);

// What an engine's implementation holds whatever its model (causal_lm_engine's and
// seq2seq_engine's impl derive from it; each adds its model and its own switches), and what the
// two do alike with it. One per rank, used by the engine's thread.
struct engine_state {
  engine_state(const config::job_spec& s, comm::process_group& g, const std::atomic<bool>* c);

  config::job_spec spec;
  comm::process_group& group;
  // model.hf_dir's files (open_model_files): config.json and the tokenizer in model_files.dir,
  // the weights opened through it (ranged reads from S3). Empty without model.hf_dir.
  model::hf_files model_files;
  const std::atomic<bool>* cancelled;
  torch::Device device;  // compute_device(spec, rank)
  std::shared_ptr<const data::dataset> data;
  std::shared_ptr<const data::dataset> eval_data;  // data.eval, or null
  std::unique_ptr<data::batch_loader> loader;
  std::unique_ptr<zero_optimizer> optimizer;
  std::int64_t total_steps = 0;
  std::int64_t steps_done = 0;
  std::int64_t gathered_peak_bytes = 0;  // of the last step
  bool checkpoint_requested = false;     // by this rank, for the next step
  bool preempt_requested = false;        // and with it a preemption
  double peak_flops = 0;                 // of `device` (mfu.hpp)

  std::int64_t global_batch() const;  // samples per step
  // What every checkpoint's manifest records besides tensors (causal_lm_engine::checkpoint_extra)
  // for a model whose config.json is `model_config`: it, the tokenizer files, the job's name, the
  // global batch, the ZeRO stage and, when the data set records added tokens with their ids,
  // "added_tokens" (vocab_plan.hpp's added_tokens_json), which the export writes into the
  // tokenizer files.
  nlohmann::json checkpoint_extra(nlohmann::json model_config) const;
  void request_checkpoint(bool preempted);
  // This rank's part of a checkpoint after steps_done steps (engine_checkpoint.hpp).
  checkpoint_part checkpoint();
  std::vector<float> full_weights();  // every trained weight in fp32 (a collective)
  // The optimizer's state, the step count and the loader's position from checkpoint `dir`.
  void restore(const std::string& dir, const ckpt::manifest& m);
};

}  // namespace cohort::core::train

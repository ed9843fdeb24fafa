// The training engine of a causal LM job on one rank of a data-parallel group: builds the model
// (a Hugging Face directory, or a config and init_seed: the same weights on any world size), reads
// this rank's micro-batches, runs forward/backward (layer by layer under ZeRO-3, each layer's
// weights gathered for its forward, freed, and gathered again for its backward; with activation
// checkpointing, layer by layer with recomputation), reduces gradients and updates the
// ZeRO-sharded fp32 master weights
// with AdamW. The loss and gradients are those of the mean over every label token of the global
// batch, so results do not depend on the world size. With model.lora the base is frozen and whole on
// every rank (in model.lora.base_dtype) and only the adapters are the ZeRO optimizer's: they alone
// have gradients, masters, moments and checkpointed tensors. With model.added_tokens (and
// model.pad_vocab_to_multiple_of) the vocabulary grows (vocab_plan.hpp): the embedding and LM head
// get the new rows at the old rows' mean (vocab_resize.hpp), and under LoRA they then train whole
// beside the adapters. One per rank, used by one thread; no torch here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"
#include "core/ckpt/async_writer.hpp"
#include "core/ckpt/manifest.hpp"
#include "core/comm/process_group.hpp"

namespace cohort::core::train {

struct step_result {
  std::int64_t step = 0;     // 1-based step just completed
  double loss = 0;           // mean over the global batch's label tokens (0 if it has none)
  double lr = 0;             // the learning rate this step used
  double grad_norm = 0;      // global L2 norm before clipping
  std::int64_t tokens = 0;   // real (non-padding) tokens in the global batch
  double seconds = 0;
  // Host time of the update (clipping, AdamW, new weights), part of seconds: with optimizer
  // offload the host AdamW; on a GPU without offload mostly the kernels' launch.
  double optimizer_seconds = 0;
  bool checkpoint_requested = false;  // some rank called request_checkpoint() before this step
  bool preempted = false;  // and one of them with preempted: after saving, run no further step
  std::vector<std::int64_t> samples;  // the data set indices this rank consumed, in order
};

// One evaluation of data.eval (causal_lm_engine::evaluate).
struct eval_result {
  double loss = 0;          // mean over every label token of the eval data set (0 if none)
  std::int64_t labels = 0;  // label tokens counted, over all ranks
  double seconds = 0;       // this rank's wall time of the evaluation
};

class causal_lm_engine {
 public:
  // `group` spans the job's ranks (world size = group.size()); `spec.scaling.num_workers` is not
  // read. Throws on a bad model or data set, naming the field and file; with spec.data.verify
  // (the default) that includes the XXH64 of every shard file, checked before any weight is loaded
  // (data::verify_checksums, on up to 8 threads of the constructor's own), unless
  // `data_verified` says the caller checked them already (verify_data_files, before the group).
  causal_lm_engine(const config::job_spec& spec, comm::process_group& group,
                   const std::atomic<bool>* cancelled = nullptr, bool data_verified = false);
  ~causal_lm_engine();
  causal_lm_engine(const causal_lm_engine&) = delete;
  causal_lm_engine& operator=(const causal_lm_engine&) = delete;

  // The CUDA device a rank computes on with scaling.use_gpu: rank % (devices visible), so ranks
  // sharing a host spread over its GPUs; -1 when none is visible. Give it to the NCCL group.
  static int cuda_device_for(int rank);

  std::int64_t total_steps() const;   // train.max_steps, else epochs × steps per epoch
  std::int64_t steps_done() const;
  // The trained ones (LoRA: the adapters', and a grown vocabulary's embedding and head).
  std::int64_t parameter_count() const;
  std::int64_t global_batch() const;  // samples per step
  // FLOPs of one token's training step (6N + 12·L·d·T, T = train.seq_len) and the dense bf16 peak
  // of this rank's GPU (0 on CPU or an unknown card): the two sides of MFU (mfu.hpp).
  double flops_per_token() const;
  double peak_flops() const;
  // ZeRO-3: the most bytes of gathered compute-dtype weights this rank held at once during the
  // last step (unit 0 for the whole step, plus the layers being used and prefetched); 0 for
  // stages 0-2, which hold whole weights.
  std::int64_t gathered_peak_bytes() const;
  // Runs the next step (a collective: every rank calls it). Throws cancelled_error when cancelled.
  step_result train_step();
  // Whether the spec names an eval data set (data.eval), opened and checked by the constructor.
  bool has_eval() const;
  // Evaluates the model as it is now on the whole eval data set (a collective: every rank calls
  // it). Rank r of W takes the samples r, r + W, r + 2W, ... in micro-batches of
  // train.micro_batch_size rows of train.seq_len tokens (longer samples cut as in training); every
  // rank runs the same number of micro-batches (rows past its share are padding that counts for
  // nothing), without gradients and with dropout off, each layer's weights gathered for its
  // forward under ZeRO-3. The loss is the sum over every rank's label tokens divided by their
  // count (one all-reduce), so it does not depend on the world size. The weights, optimizer and
  // data position are untouched. Throws logic_error without data.eval, cancelled_error when cancelled.
  eval_result evaluate();
  // Marks the next step's result checkpoint_requested (and, when `preempted`, preempted) on every
  // rank (it travels with the step's first all-reduce, so the group agrees without another
  // collective).
  void request_checkpoint(bool preempted = false);
  // Every trained weight in fp32, flattened in hf_parameters() order (a collective); with LoRA the
  // adapters in lora_parameters() order.
  std::vector<float> full_weights();

  // This rank's part of a checkpoint of the state after steps_done() steps: host copies of the
  // master weights and AdamW moments it keeps (see engine_checkpoint.hpp), and its step, sampler
  // position, LR schedule position and RNG state.
  struct checkpoint_part {
    std::vector<ckpt::shard_tensor> tensors;  // reads the live state: save it before the next step
    ckpt::rank_state state;
  };
  checkpoint_part checkpoint();
  // What every checkpoint's manifest records besides tensors: the model's config.json (its
  // vocab_size grown), the global batch and the ZeRO stage (checked on restore, used by export),
  // the tokenizer files and the data set's added tokens with their ids (written into the
  // export's tokenizer files).
  nlohmann::json checkpoint_extra() const;
  // Continues from committed checkpoint `dir` (manifest `m`) written by any world size with the
  // same global batch: weights, moments, step, sampler position and (same world size) RNG.
  // A collective. Throws std::invalid_argument naming the checkpoint and what does not match.
  void restore(const std::string& dir, const ckpt::manifest& m);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace cohort::core::train

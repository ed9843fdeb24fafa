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
// beside the adapters. With workload reward_model (DeepSpeed-Chat's step 2) the decoder has
// transformers' `score` head (num_labels 1) in place of its LM head, reads pairs data sets (a
// micro-batch's chosen rows, then its rejected rows, in one forward), and the loss and gradients
// are those of the mean over the global batch's pairs of −log σ(r_chosen − r_rejected), each
// score read at its row's last token that is not the data set's pad id; LoRA is refused for it.
// The contract is training_engine's (training_engine.hpp); what is this engine's own is said
// below. One per rank, used by one thread; no torch here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"
#include "core/comm/process_group.hpp"
#include "core/train/training_engine.hpp"

namespace cohort::core::train {

class causal_lm_engine final : public training_engine {
 public:
  // `group` spans the job's ranks (world size = group.size()); `spec.scaling.num_workers` is not
  // read. Throws on a bad model or data set, naming the field and file; with spec.data.verify
  // (the default) that includes the XXH64 of every shard file, checked before any weight is loaded
  // (data::verify_checksums, on up to 8 threads of the constructor's own), unless
  // `data_verified` says the caller checked them already (verify_data_files, before the group).
  causal_lm_engine(const config::job_spec& spec, comm::process_group& group,
                   const std::atomic<bool>* cancelled = nullptr, bool data_verified = false);
  ~causal_lm_engine() override;
  causal_lm_engine(const causal_lm_engine&) = delete;
  causal_lm_engine& operator=(const causal_lm_engine&) = delete;

  // The CUDA device a rank computes on with scaling.use_gpu: rank % (devices visible), so ranks
  // sharing a host spread over its GPUs; -1 when none is visible. Give it to the NCCL group.
  static int cuda_device_for(int rank);

  // training_engine's methods; what is this engine's own:
  std::int64_t total_steps() const override;
  std::int64_t steps_done() const override;
  std::int64_t parameter_count() const override;
  std::int64_t global_batch() const override;
  // 6N + 12·L·d·T FLOPs per token, T = train.seq_len.
  double flops_per_token() const override;
  double peak_flops() const override;
  // ZeRO-3: unit 0 for the whole step, plus the layers being used and prefetched.
  std::int64_t gathered_peak_bytes() const override;
  step_result train_step() override;
  // Whether the steps' micro-batches now replay CUDA graphs (train.cuda_graph; see step_graph.hpp).
  bool step_graphed() const;
  // Why train.cuda_graph does not apply to `spec` on a GPU (whose model or LoRA adapters have
  // dropout when `dropout`), naming the field or the model that stands in the way; empty when it
  // applies or the spec turns it off.
  static std::string step_graph_refusal(const config::job_spec& spec, bool dropout);
  std::string step_graph_status() const override;
  bool has_eval() const override;
  // Rank r of W takes the samples r, r + W, r + 2W, ... in micro-batches of
  // train.micro_batch_size rows of train.seq_len tokens (longer samples cut as in training); every
  // rank runs the same number of micro-batches (rows past its share are padding that counts for
  // nothing), each layer's weights gathered for its forward under ZeRO-3; one all-reduce.
  eval_result evaluate() override;
  void request_checkpoint(bool preempted = false) override;
  // With LoRA: the adapters, in lora_parameters() order.
  std::vector<float> full_weights() override;
  checkpoint_part checkpoint() override;
  // config.json with its vocab_size grown; the added tokens are written into the export's
  // tokenizer files.
  nlohmann::json checkpoint_extra() const override;
  void restore(const std::string& dir, const ckpt::manifest& m) override;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace cohort::core::train

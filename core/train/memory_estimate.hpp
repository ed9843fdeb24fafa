// What one rank of a causal_lm job needs in GPU memory and host RAM, item by item, for every ZeRO
// stage (0-3), precision (fp32/bf16), zero.offload_optimizer and zero.offload_param, and what the
// head and `submit plan` compare against a node's memory. Torch-free: the head computes it from
// config.json alone. All sizes are bytes per rank; n = parameters, w = scaling.num_workers
// (stage 0: 1), p = bytes of the compute dtype (bf16 2, fp32 4), S = this rank's fp32 shard
// elements: ceil(U0/w) + L·ceil(UL/w), U0 the parameters outside the layers (unit 0: embeddings,
// final norm, head), UL those of one layer (units 1..L). Where the engine keeps what
// (zero_optimizer.hpp, causal_lm_engine.cpp):
//   - fp32 master shard (4·S) and AdamW moments (8·S): on the GPU; in host RAM with
//     offload_optimizer or offload_param (stage 0: S = n, replicated).
//   - fp32 gradient shard accumulator (4·S): on the GPU; in host RAM with offload_param.
//   - compute weights: stages 0-2 the whole model on the GPU (p·n); stage 3 only the gathered
//     units, unit 0 for the whole step plus the current layer and the prefetched next (p·(U0 +
//     2·UM), UM the largest layer: UL for a decoder; (K − 1)·p·UM more for the K last layers
//     kept gathered from their forward to their backward, layers_kept_gathered); with
//     offload_param also a pinned compute-dtype copy of the shard in host RAM (p·S).
//   - compute-dtype gradients (.grad) until reduced: the whole model (p·n) at stages 0-1 and at
//     stage 2 without activation checkpointing (reduced once per step); unit 0 plus one layer
//     (p·(U0 + UM)) where layers are reduced right after their backward (stage 3, stage 2 with
//     activation checkpointing). Stage 3 frees a layer's gathered weights between its forward
//     and its backward (but for the K last), so its graph's references to them cost nothing. On
//     the fused path a stage-3 layer's GEMMs write their weights' gradients into its fp32
//     reduction buffer from its backward's start (zero_options::weight_grads_in_buffer), and
//     only its norms' go through .grad; the plan counts them as before (the 7B shape on 2 GPUs
//     peaked at 58.2 GiB that way, 58.4 through .grad).
//   - the reduction buffer: one unit's gradients flattened to fp32 (4·max(U0, UM)), plus the
//     reduce-scatter output shard at stages 2-3 (4·ceil(max/w)).
//   - host staging of one unit's fp32 gradient shard (4·ceil(max/w)) with either offload.
//   - a checkpoint: its write buffer (64 MiB: a save streams the shard from where it lies), or
//     with run.checkpoint.async and 12·S within run.checkpoint.staging_bytes its host copy of the
//     master shard and moments (12·S), held while training goes on.
//   - with run.checkpoint.replicate, the peer replicas in the node's memory (tmpfs): this rank's
//     checkpoint shard and the copy it keeps for its buddy on another node (2·12·S); with
//     run.checkpoint.replicate_every those of two steps at the peak, the newest complete one kept
//     until the next is complete on every node (4·12·S).
//   - the process itself: libraries, CUDA's host state, the loader (gpu_process_host_bytes /
//     cpu_process_host_bytes).
//   - activations of one micro-batch (tokens t = micro_batch_size·seq_len): where the engine
//     recomputes layers (train.activation_checkpointing, any stage) the L+1 layer inputs
//     (p·d·t each) and the larger of the logits (below) and one layer's backward: the incoming
//     and outgoing gradient (2·p·d·t) and its working set; otherwise (ZeRO-3 included) L
//     working sets, the embedding output and the logits. A layer's working set is
//     t·(p·(9·d + k·ffn) + 16·d) (attention 8·d and norm2 output d in the compute dtype; k = 4 for
//     gated MLPs (gate, up, activation, product), 2 otherwise; 16·d for the two norms' fp32
//     temporaries). The logits are t·V·(p + 4 + 4): the compute-dtype logits, their fp32 copy
//     for the loss and its fp32 gradient. On the GPU attention is fused (at::scaled_dot_product_
//     attention: no T² term); on CPUs the explicit path keeps B·H·T²·(4 + p) per layer saved.
//     With train.deterministic a GPU takes torch's math path, which computes in fp32: 4·B·H·T²
//     per layer saved (the probabilities) and 16·B·H·T² more at its peak (in place of the logits
//     where those are larger; fitted to the one peak measured, the 1.1B Llama at 8 × 2048 on an
//     H200: 4 GiB a layer, 132.4 GiB in all at its first step, before AdamW's moments exist).
//     The fused compute path (a decoder on a GPU, train.compute_path automatic or fused) keeps
//     less: per token of a layer, in the compute dtype, the two norms' inputs and outputs (4·d),
//     the fused q/k/v projection (d + 2·kv, kv = the key/value heads' width) that attention
//     saves, attention's output and its copy for the o projection (2·d), and the MLP's saved
//     tensors (3·ffn gated: gate/up and the product; 2·ffn otherwise), plus 8 bytes of norm
//     statistics: t·(p·(7·d + 2·kv + k'·ffn) + 8). Its loss is chunked over
//     train.loss_chunk_tokens positions (c): a chunk's logits over the vocabulary padded to a
//     multiple of 64 and as much again for what its GEMMs and loss hold beside (2·c·V'·p, a
//     margin fitted to the measured peaks), and the head's fp32 weight gradient (4·V'·d),
//     instead of the whole batch's logits. Against the allocator's peaks
//     measured on H200s (BENCHMARKS.md) the plan lies 1-11% above (up to 7% under with both
//     offloads). Host RAM lies 0-10% above the ranks' measured peak RSS (7B, 13B; a test holds it).
//   - cuda_context_bytes on the GPU of every GPU process.
// With model.lora only the adapters train: every item above counts them (n = L·A, U0 = 0, UL = A,
// A the adapters of one layer; with model.added_tokens or pad_vocab_to_multiple_of also the
// weights outside the layers, U0, which train whole when the vocabulary grows), and the frozen base
// is one more device item, the whole model in model.lora.base_dtype on every rank (a 7B base in
// bf16: 12.6 GiB); activations are the same. The plan takes config.json's vocabulary, not a grown one.
// Rank 0's merged export holds every adapter plus one base tensor as read and in fp32.
// A T5's blocks are its layers (encoder and decoder blocks, units 1..L): seq2seq_engine gathers
// them one at a time at ZeRO-3 as the decoder engine does its layers, and its largest unit (UM) is
// a decoder block (cross-attention).
// Host RAM is the larger of the steady state and the load peak: a rank reads or initialises only
// the fp32 shard it keeps, a unit at a time, plus one parameter tensor at a time (4·largest
// tensor); the shard (4·S; stage 0 the whole model) stays in host RAM on a CPU and with offload.
// Otherwise each unit's shard goes on to the GPU as it is read (4·largest unit shard, written in
// place). Rank 0 also stages the largest fp32 tensor when it exports the final model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/job_spec.hpp"
#include "core/model/model_config.hpp"

namespace cohort::core::train {

// CUDA context, cuBLAS workspace, NCCL buffers and caching-allocator slack of one GPU process:
// on the GPU beside what the tensors need (measured 0.5-1 GiB with libtorch 2.x; the upper end).
inline constexpr double cuda_context_bytes = 1024.0 * 1024.0 * 1024.0;
inline constexpr double gib = 1024.0 * 1024.0 * 1024.0;
// ZeRO-3 with offload_param: the part of the job's GPU cap that the parameter shards kept on the
// GPU between updates leave free (memory_estimate::param_shard_units_kept_on_device). The plan
// counts the bytes tensors hold, while the caching allocator reserves more than it hands out: the
// Llama-2-7B shape on 2 GPUs under a 24 GiB cap with 4 micro-batches was planned at 18.9 GiB,
// allocated 18.3 and reserved 22.2. The shards only save copies from the host: not worth the risk
// of running out of memory for.
inline constexpr double kept_shards_cap_margin = 0.1;
// ZeRO-3: the plan keeps more layers gathered from their forward to their backward
// (memory_estimate::layers_kept_gathered) only while this many times the planned GPU bytes fit
// the rank's GPU: the caching allocator reserves more than it hands out, and more than the cap's
// margin above allows for: 73.2 GiB reserved for a 58.9 GiB peak (the 7B shape on 2 H200s, 3
// layers kept), 32.3 for 30.5 (the 1.1B, every layer kept).
inline constexpr double kept_layers_reserve_factor = 1.25;
// Host RAM of a rank's process beside its tensors: the mapped libraries (libtorch, CUDA, NCCL),
// the CUDA context's host side and the data loader. Fitted to the host peaks of GPU jobs whose
// state lives on the GPU (1.3-1.4 GiB with one unit loaded; BENCHMARKS.md).
inline constexpr double gpu_process_host_bytes = 1.0 * gib;
inline constexpr double cpu_process_host_bytes = 0.5 * gib;
// The one buffer a checkpoint save streams a shard through (ckpt::write_options::chunk_bytes).
inline constexpr double checkpoint_chunk_bytes = 64.0 * 1024 * 1024;

// The sizes of the model that matter for memory; shape_of() derives them from a config exactly as
// core/model/decoder.cpp lays out its parameters.
struct model_shape {
  std::int64_t parameters = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t kv_hidden = 0;  // key/value heads × head dim (hidden_size without grouped heads)
  std::int64_t vocab_size = 0;
  std::int64_t intermediate_size = 0;
  bool gated_mlp = false;
  std::int64_t outer_parameters = 0;  // unit 0: embeddings, projections, final norm, head
  std::int64_t layer_parameters = 0;  // one decoder layer (each of units 1..L)
  std::int64_t largest_tensor = 0;    // elements of the largest single parameter tensor
  // model.lora: the adapters' elements of one layer (r · (in + out) per adapted linear map).
  std::int64_t lora_layer_parameters = 0;
  // model.lora: the elements one layer's frozen base holds beside q/k/v's and gate/up's rows for
  // their adapters (lora_room_elements).
  std::int64_t lora_room_layer_elements = 0;
  // The largest of units 1..L (a T5's decoder block); 0: every layer has layer_parameters.
  std::int64_t largest_layer_parameters = 0;
  bool fused_path = false;  // runs train.compute_path's fused path on GPUs (decoders; not T5)
  bool seq2seq = false;     // a T5: its engine gathers each block for each use (none kept)
};

model_shape shape_of(const model::model_config& config);
// A T5's: num_layers counts encoder and decoder blocks; unit 0 holds the shared embedding, the
// two final norms, the two relative-position tables and an untied head; layer_parameters is the
// blocks' mean (rounded up; decoder blocks are larger: cross-attention), parameters exact. The
// activations are estimated as a decoder's of train.seq_len tokens per sample over all blocks.
model_shape shape_of(const model::t5_config& config);
// The adapters' elements of one layer for LoRA of rank r on `targets` (peft's module names).
std::int64_t lora_layer_parameters(const model::model_config& config, std::int64_t r,
                                   const std::vector<std::string>& targets);
// The room one layer's frozen base holds for LoRA of rank r on `targets` (decoder_impl::load_frozen):
// where q, k and v (and gate and up) all have adapters, their rows are model::lora_room_row_stride
// apart instead of in. 0 for GPT-2's Conv1D weights.
std::int64_t lora_room_elements(const model::model_config& config, std::int64_t r,
                                const std::vector<std::string>& targets);
// The model's shape from the spec's model section (hf_dir's config.json, fetched alone from S3 as
// `s3_endpoint` and the environment say when hf_dir is there; a config file or the inline config).
// Throws std::invalid_argument naming the field and the problem.
model_shape read_model_shape(const config::model_spec& model, const std::string& s3_endpoint = "");

// One entry of a rank's memory: what it is, bytes, and where it lives.
struct memory_item {
  std::string name;  // e.g. "fp32 master shard"
  double bytes = 0;        // negative for two items never alive at once (their overlap)
  bool on_device = false;  // GPU memory; host RAM otherwise
};

struct rank_memory {
  std::vector<memory_item> items;   // everything counted, cuda context included
  double device_bytes = 0;          // GPU memory (0 for CPU jobs), cuda_context_bytes included
  double steady_host_bytes = 0;     // host RAM while training
  double load_peak_host_bytes = 0;  // host RAM while loading: kept fp32 shard + largest tensor
  double host_bytes = 0;            // max(steady_host_bytes, load_peak_host_bytes)
  double activation_bytes = 0;      // of one micro-batch (part of device or host bytes)
};

struct memory_estimate {
  model_shape model;
  rank_memory per_rank;                // every rank the same
  // ZeRO-3 with offload_param and train.grad_accum > 1: the micro-batches' gradient shards are
  // summed on the GPU (zero_options::sum_grads_on_device), counted on the device, when the job
  // sets COHORT_GPU_MEMORY_LIMIT_GB and the rest leaves room for them under it; else (no cap: the
  // GPU's size is the node's, unknown to the plan) summed on the host. The engine asks this plan.
  bool grads_summed_on_device = false;
  // ZeRO-3 with offload_param: how many units, the layers in order first and unit 0 last (see
  // zero_options::param_shard_units_kept_on_device), keep the rank's compute-dtype parameter
  // shard on the GPU between updates, counted there: as many as fit, after the above, within the
  // job's cap less kept_shards_cap_margin of it; 0 without a cap. The other units' gathers copy
  // their shards from the host. The engine asks this plan.
  std::int64_t param_shard_units_kept_on_device = 0;
  // Stage 3: how many layers, the last ones first, keep their gathered weights from their
  // forward to their backward (zero.layers_kept_gathered; the engine asks this plan). The spec's
  // count when it sets one; else 1 (the last layer: the head's forward and backward run between
  // its two uses) and, without offload_param and where the rank's usable GPU bytes are known
  // (estimate_memory's gpu_bytes, else the job's cap), as many more as fit after everything
  // above within them divided by kept_layers_reserve_factor. Each beyond the first is counted on the
  // device: the plan's gathered weights already hold two layers at the backward's start (the
  // last, kept, and the one below, prefetched). 0 below stage 3 and for a T5.
  std::int64_t layers_kept_gathered = 0;
  double rank0_extra_host_bytes = 0;   // rank 0's export staging buffer (largest fp32 tensor)
  std::string setting;                 // "ZeRO-3, bf16, offload_param cpu" and the like
};

// gpu_bytes: what the rank may use of its GPU where known (usable_gpu_bytes of the job's cap and
// the device's size, which only the engine knows); 0: the job's cap alone, if any.
memory_estimate estimate_memory(const config::job_spec& spec, const model_shape& model, double gpu_bytes = 0);

// COHORT_GPU_MEMORY_LIMIT_GB from a job's runtime_env.env_vars: the GPU memory a rank may use, in
// bytes; 0 when absent. Throws std::invalid_argument naming the variable when it is not a number
// > 0.
double gpu_memory_limit_bytes(const std::map<std::string, std::string>& env_vars);
// What a rank may use on a GPU of node_gpu_bytes (0 = unknown) under limit_bytes (0 = none);
// 0 = unknown.
double usable_gpu_bytes(double limit_bytes, double node_gpu_bytes);

// "31.2 GiB"; "12.5 MiB" below 1 GiB.
std::string format_memory(double bytes);

}  // namespace cohort::core::train

// ZeRO partitioning of a decoder's weights and the AdamW update over the shards. The weights are
// grouped in units (unit 0: everything outside the decoder layers; unit 1 + l: layer l), each
// flattened to fp32 and split into equal shards, one per rank (stage 0: one shard, the whole unit,
// on every rank). Each rank keeps the fp32 master copy and AdamW moments of its shards only (on the
// host with offload), reduces gradients into its shards (all-reduce for stages 0-1,
// reduce-scatter for 2-3) and gathers weights back in the compute dtype (stages 1-2 after each
// update; stage 3 one unit at a time, on demand). On CUDA the compute stream waits for each
// collective without blocking the host; synchronize() checks their outcome. One per rank, used by
// one thread; holds the model's parameter tensors.
//
// Each unit's parameters are views of one flat compute-dtype buffer of the unit, for the
// optimizer's whole life, in hf_parameters() order (a layer's q, k, v and gate, up lie one after
// another: the fused GEMMs read them in place). Stages 0-2 keep it whole and refill it after each
// update (the update writes it directly on one part; else an all-gather fills it).
// Stage 3 (FSDP2's semantics): gather() allocates that buffer's storage and fills
// it (an all-gather of the shards); release() frees the storage and leaves the tensors. Autograd
// keeps the parameters (or views of them) that a forward saved for its backward, and those hold
// no memory while their unit is released: a layer's graph can be kept from its forward to its
// backward without its weights, and gather() before the backward refills them in place.
//
// Where a rank's bytes live (S = this rank's elements of all shards, P = the model's parameters):
//   device, stages 0-2: P compute-dtype weights + S fp32 gradient shard (compute dtype for one
//     rank with the update on the GPU) (+ S master and 2S moments without offload); stage 3:
//     the gathered units in use + S fp32 gradient shard (+ 3S fp32 without offload); stage 3
//     with offload_param: only the gathered units in use, plus the compute-dtype shards of the
//     units kept there (zero_options::param_shard_units_kept_on_device) and with
//     sum_grads_on_device the micro-batches' fp32 sums. A unit's gradient shard exists from
//     its first reduction in a step to the update, so at a step's peak (the start of its
//     backward) few of them do.
//   host: 3S fp32 with offload (master, moments); with offload_param also the S fp32 gradient
//     shard and an S compute-dtype copy of the master that gathers copy up (both pinned), and
//     with several micro-batches summed on the host two staging buffers of the largest unit's
//     shard. On CUDA the gradient shards go to the host on a stream of their own, overlapping
//     the backward's compute, and the gathers' copies up from the host on another, overlapping
//     the layer before.
// A unit may be empty (a LoRA model trains nothing outside its layers: unit 0); it takes part in
// no collective and no update.
// The initial values come from a weight_source a slice at a time: a rank reads only the elements
// of its own shards (plus, for stages 0-2, the all-gather of the whole weights), so the full model
// is never held in fp32 by anyone.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "core/comm/process_group.hpp"
#include "core/model/adamw.hpp"
#include "core/model/decoder.hpp"
#include "core/model/weight_grad_sink.hpp"
#include "core/model/weight_source.hpp"
#include "core/train/shard_keep_order.hpp"
#include "core/train/unit_update_thread.hpp"

namespace cohort::core::model {
struct fused_adamw_target;
}  // namespace cohort::core::model

namespace cohort::core::train {

struct zero_options {
  int stage = 0;                          // 0..3
  bool offload = false;                   // master shard + moments in host memory, update there
  // Stage 3 only, implies offload: the gradient shard and a compute-dtype copy of the weights'
  // shard also live in (pinned) host memory; the device holds only the units being gathered.
  bool offload_param = false;
  torch::Device device = torch::kCPU;     // where the model computes
  torch::ScalarType compute_dtype = torch::kFloat;  // the model's weights (fp32 or bf16)
  // offload_param: step() hands the host update to a thread of its own and returns; the next
  // step's forward runs while it goes on, each gather waiting for its unit's update only (see
  // step()). false: step() updates every unit before it returns. The results are the same.
  bool overlap_host_update = true;
  // offload_param and overlap_host_update: the one-step delayed parameter update of ZeRO-Offload
  // (its "DPU"): the host update of step k runs during the whole of step k + 1, whose forward and
  // backward use the weights from before it (those of step k − 1's update), so each gradient is
  // one update late. The gradient shards and the weights' compute-dtype copies are kept twice
  // (one pair written by the step, the other read by the update). A checkpoint (master(), adam())
  // ends the delay: the update is waited for and the next step uses its weights, as a run resumed
  // from that checkpoint does, so resuming stays exact. Changes the results: an opt-in.
  bool delayed_update = false;
  // delayed_update: how many updates are made on time first (counted as the moments' step, so
  // across resumes too), as ZeRO-Offload starts the delay after the first steps, which move the
  // weights most (the engine passes the learning rate's warmup).
  std::int64_t delay_after = 0;
  // offload_param with several micro-batches a step: each micro-batch's reduced gradient shard
  // of a unit is summed on the device and only the last one's reduction (reduce_grads' `last`)
  // sends the sum to the host (4 bytes an element of the rank's shards on the device while the
  // step runs). false: each later micro-batch's shard is copied to the host through one of two
  // pinned staging buffers and added there one reduction later (see deferred_add), so the host
  // waits only for copies the device has long finished. The same sums either way.
  bool sum_grads_on_device = false;
  // offload_param: the first n units of this count n in shard_keep_position's order, layers
  // first, unit 0 last (units 1..n; n from unit_count() on: every unit) copy their compute-dtype
  // shard to the device at their first gather after each update and keep it there, so that the
  // step's later gathers of the unit (the backward's recomputation, every later micro-batch's)
  // read it from device memory instead of the host (2 bytes an element of those units' shards on
  // the device for good). The other units' gathers copy it from the host every time; 0: every
  // unit's do. Unit 0 comes last because the engine gathers it once a step and holds it through
  // the step: its one gather after an update copies from the host either way. The same weights
  // either way. Negative: invalid_argument.
  std::int64_t param_shard_units_kept_on_device = 0;
  // Stage 3 without offload_param: the fused path's GEMMs write the weights' gradients straight
  // into the unit's fp32 reduction buffer (model::weight_grad_sink; the optimizer is one while it
  // lives), so that a layer's reduction widens only what autograd accumulated (the norms'
  // weights). false: every gradient goes through .grad. The same sums up to the GEMMs' rounding
  // (fp32 where they rounded to the compute dtype).
  bool weight_grads_in_buffer = true;
  // Stage 3 on several ranks with the update on the GPU (cohort's AdamW kernel, no offload):
  // step() queues no update; each unit's runs at its next gather (the next forward's, normally),
  // on the gathers' stream, and writes the compute-dtype shard that the all-gather reads in the
  // same pass (no cast of its own). The update then overlaps the forward's compute of the layers
  // before instead of holding the end of the step. Whatever reads a unit's master, moments or
  // gradient shard first (master(), adam(), full_weights(), refresh_weights(), a reduction into
  // it, the next step()) runs its update first, on the compute stream. The same kernel on the same
  // inputs: bitwise the same weights. false: every unit updated inside step().
  bool update_at_next_gather = true;
};

// Waits for one collective (cancellation-aware; see run_control.hpp).
using wait_function = std::function<void(const std::shared_ptr<comm::work>&)>;

class zero_optimizer {
 public:
  // `params` are the model's weights (decoder_impl::hf_parameters(); their values are not read:
  // placeholders from make_placeholder_decoder will do); their initial values come from `initial`,
  // of which this rank reads only its shards. Each parameter's data is replaced: stages 0-2 give
  // it its whole value on options.device in the compute dtype (an all-gather of the masters);
  // stage 3 leaves it empty until gather(). Throws invalid_argument for a bad stage, offload_param
  // below stage 3 or a negative param_shard_units_kept_on_device, and what `initial` throws.
  zero_optimizer(const std::vector<model::hf_parameter>& params, const model::weight_source& initial,
                 comm::process_group& group, const zero_options& options, wait_function wait);
  ~zero_optimizer();
  zero_optimizer(const zero_optimizer&) = delete;  // registered as a sink by its address
  zero_optimizer& operator=(const zero_optimizer&) = delete;

  std::size_t unit_count() const { return units_.size(); }
  static std::size_t layer_unit(std::int64_t layer) { return static_cast<std::size_t>(layer + 1); }
  std::int64_t parameter_count() const { return parameter_count_; }

  // Stage 3: makes unit u's weights whole in the model (allocates the unit's buffer and
  // all-gathers the shards into it) / frees the buffer's storage (the parameter tensors stay, with
  // their shapes, holding no memory; reading one before the next gather() is an error the caller
  // must avoid). prefetch(u) starts that all-gather so it overlaps the compute before gather(u)
  // (which then only waits); every rank must gather and prefetch the same units in the same
  // order. gather() and prefetch() of a unit that is gathered (or, for prefetch, being gathered)
  // do nothing. No-ops for stages 0-2, whose weights stay whole; an index past the last unit is
  // ignored by prefetch.
  void prefetch(std::size_t u);
  void gather(std::size_t u);
  void release(std::size_t u);
  bool gathered(std::size_t u) const { return units_.at(u).gathered; }
  // Stage 3: bytes of gathered weights this rank holds now (the storage of the units' buffers,
  // prefetches included), and the most it held at once since reset_gathered_peak(). 0 for
  // stages 0-2.
  std::int64_t gathered_bytes() const { return gathered_bytes_; }
  std::int64_t gathered_peak_bytes() const { return gathered_peak_bytes_; }
  void reset_gathered_peak() { gathered_peak_bytes_ = gathered_bytes_; }
  // offload_param: bytes of the compute-dtype shards this rank keeps on the device between
  // updates (zero_options::param_shard_units_kept_on_device), each from its unit's first gather.
  std::int64_t kept_shard_bytes() const;
  // Stage 3: releases every gathered unit (step() and refresh_weights() do, since the weights
  // change).
  void release_all();

  // Sets this rank's gradient shards to zero (start of a step).
  void zero_grad_shards();
  // Reduces the gradients accumulated in unit u's weights (.grad) across ranks, adds this rank's
  // part to its gradient shard and clears the weights' .grad. `last`: no later micro-batch of
  // this step reduces unit u again (with sum_grads_on_device the sum then goes to the host).
  // Stages 2-3 without offload_param add the part only at the next reduce_grads or synchronize()
  // (pending_reduction_), so a unit's gradient shard is read after synchronize().
  void reduce_grads(std::size_t u, bool last = true);
  // Adds the pending reduction, then waits on the host for every collective issued so far
  // (cancellation-aware, through `wait`) and rethrows the first failure. Call it before reading
  // gradient shards or results on the host (grad_square_sum).
  void synchronize();
  // Sum of squares of this rank's gradient shards (fp64) as a 0-dim tensor: on the device for
  // CUDA shards (the host does not wait for it), on the host for host shards; with offload_param
  // from the squares taken on the device as the shards were reduced, where every shard went to
  // the host whole (see device_squares_). Stage 0: of the whole gradient.
  torch::Tensor grad_square_sum() const;
  // Scales the gradient shards by clip_coef, runs AdamW on the master shards and brings the
  // model's weights up to date (stages 0-2; stage 3 gathers on demand). clip_coef: a 0-dim fp64
  // tensor on the device of the shards (the CUDA update reads it there: no host wait) or on the
  // host; undefined for 1.
  // With offload_param and overlap_host_update the update runs on the host, unit by unit in
  // unit order (the forward's), on a thread of its own, and step() returns once it is handed
  // over: the next step's gather of a unit, the reduction into its gradient shard, master(),
  // adam(), full_weights() and refresh_weights() wait for the units they read. The update of
  // each unit is the same computation on the same inputs as without overlap: bitwise the same
  // weights.
  // With update_at_next_gather (see zero_options) the update is only recorded here.
  void step(const model::adamw_options& options, const torch::Tensor& clip_coef);
  // With delayed_update (see zero_options) the update of a step is read by the step after next;
  // master(), adam(), full_weights() and refresh_weights() wait for it and end the delay.
  // Seconds the last overlapped host update took on its thread (0 without overlap): the update's
  // cost that the device's work of the next step hid, in part or whole.
  double overlapped_update_seconds() const { return updates_ ? updates_->last_busy_seconds() : 0.0; }
  void step(const model::adamw_options& options, double clip_coef) {
    step(options, torch::scalar_tensor(clip_coef, torch::kDouble));
  }

  // Every weight in fp32, flattened in hf_parameters() order (a collective for stages 1-3).
  torch::Tensor full_weights();

  // For checkpoints. A parameter of a unit: elements [offset, offset + numel) of the unit.
  struct parameter_place {
    std::string name;  // Hugging Face name
    std::vector<std::int64_t> shape;
    std::int64_t offset = 0;
    std::int64_t numel = 0;
  };
  std::vector<parameter_place> parameters_of(std::size_t u) const;
  // The elements of unit u whose master and moments this rank keeps (padding excluded): every
  // element for stage 0 (replicated), this rank's shard otherwise.
  std::pair<std::int64_t, std::int64_t> kept_range(std::size_t u) const;  // (begin, length)
  bool replicated() const { return options_.stage == 0; }
  torch::Tensor& master(std::size_t u) {  // (shard) fp32
    settle(u);
    return units_.at(u).master;
  }
  model::adamw_state& adam(std::size_t u) {
    settle(u);
    return units_.at(u).adam;
  }
  // After the masters were overwritten (a restore): brings the model's weights up to date
  // (stages 0-2, a collective; stage 3 gathers on demand anyway).
  void refresh_weights();

 private:
  struct slot {
    std::string name;
    torch::Tensor param;  // the model's parameter (its data is swapped for stage 3)
    std::vector<std::int64_t> shape;
    std::int64_t offset = 0;  // within the unit
    std::int64_t numel = 0;
  };
  struct unit {
    std::vector<slot> slots;
    std::int64_t numel = 0;
    std::int64_t shard = 0;  // elements per rank's shard (padded)
    torch::Tensor master;    // (shard) fp32, on the optimizer's device
    model::adamw_state adam;  // moments like master
    torch::Tensor grad;       // (shard) fp32 gradient accumulator (grads_in_compute_dtype: the
                              // compute dtype), on the compute device from a step's first
                              // reduction to its update, undefined between (as FSDP2's
                              // set_to_none); pinned host with offload_param, for good
    // One rank, grads_in_compute_dtype, every slot's .grad usable as it is (kept_as_parts): those
    // .grad tensors, flattened, in slot order, from the step's reduction to its update, in place of
    // `grad` (then undefined): the update reads each where autograd left it, with no flat copy
    // of the unit's gradients (1.2 ms of copies a step at the 1.1B shape on one H200).
    std::vector<torch::Tensor> grad_parts;
    bool grad_pending = false;  // offload_param: no gradient reduced into `grad` yet this step
    // update_at_next_gather: step() left this unit's update (of `grad`) to its next gather.
    bool update_pending = false;
    // offload_param with sum_grads_on_device: the micro-batches' sum so far of this step, on the
    // device, until the last reduction sends it to `grad`.
    torch::Tensor device_grad_sum;
    torch::Tensor host_weights;  // offload_param: (shard) compute dtype, pinned host; gathers read it
    // A unit kept on the device (param_shard_units_kept_on_device): host_weights' copy there,
    // which gathers read while device_weights_fresh (until the next update, or a load, writes
    // host_weights). Undefined for the other units.
    torch::Tensor device_weights;
    bool device_weights_fresh = false;
    // delayed_update: the other gradient shard and weights' copy, which the update in flight reads
    // and writes while the step uses the ones above; step() swaps the pairs.
    torch::Tensor spare_grad, spare_weights;
    // (parts * shard) compute dtype on the device, the slots' parameters are views of it. Stage 3:
    // its storage holds bytes only between gather (or prefetch) and release; stages 0-2: always
    // (the whole weights), refilled after each update.
    torch::Tensor full;
    bool gathered = false;  // stage 3: full holds the unit's weights (or a prefetch fills it)
    // weight_grads_in_buffer: (parts * shard) fp32 on the device, the unit's next reduction's
    // buffer, from the first gradient a GEMM writes into it (sink_target) to that reduction;
    // written[i]: slot i's part holds a gradient of this reduction.
    torch::Tensor sunk;
    std::vector<bool> written;
  };
  // weight_grads_in_buffer: the model::weight_grad_sink the optimizer registers while it lives.
  class grad_sink final : public model::weight_grad_sink {
   public:
    explicit grad_sink(zero_optimizer& owner) : owner_(owner) {}
    model::weight_grad_target target_of(const torch::Tensor& weights) override {
      return owner_.sink_target(weights);
    }

   private:
    zero_optimizer& owner_;
  };
  // The part of its unit's reduction buffer that takes the gradient of `weights` (adjacent whole
  // slots of a gathered unit's buffer, viewed as one 2-D tensor), allocated at the unit's first;
  // accumulate when those slots' parts hold a gradient already (slots of the range that do not
  // are zeroed first). Undefined for weights that are not this optimizer's.
  model::weight_grad_target sink_target(const torch::Tensor& weights);
  std::unique_ptr<grad_sink> sink_;
  // The compute-dtype shard a gather of unit u reads: for a unit kept on the device
  // (kept_on_device), host_weights' copy there, made again only after host_weights changed; with
  // offload_param otherwise host_weights copied up (on CUDA on the upload stream, see
  // fill_on_uploads); else device_shard.
  torch::Tensor gather_shard(std::size_t u);
  // offload_param: whether unit u keeps its compute-dtype shard on the device between updates
  // (zero_options::param_shard_units_kept_on_device, in shard_keep_position's order).
  bool kept_on_device(std::size_t u) const {
    const auto place = static_cast<std::int64_t>(shard_keep_position(u, units_.size()));
    return options_.offload_param && place < options_.param_shard_units_kept_on_device;
  }
  // On CUDA a gather's shard (with offload_param its copy up from the host, else its cast to the
  // compute dtype, or the unit's left update writing it) and the collective that fills the
  // unit's buffer from it run on a stream of their own (the upload stream), so that the next
  // unit's, which the engine prefetches before it queues this unit's layer, overlaps that layer
  // instead of queuing before it on the compute stream (the cast: 9.7 ms a step of the 7B shape on
  // 2 GPUs). fill_on_uploads(fill, used) runs `fill` (the all-gather into the unit's buffer, or the
  // copy into it on one rank) with the upload stream current, after that stream waits for what the
  // compute stream has queued so far (the buffer may be a block that queued work still reads),
  // keeps each tensor of `used` (the buffer first) from reuse until the stream is past it, and
  // returns what orders the compute stream after the fill. Anywhere else it runs `fill` and
  // returns an empty function.
  std::function<void()> fill_on_uploads(const std::function<void()>& fill,
                                        const std::vector<torch::Tensor>& used);
  std::optional<c10::Stream> upload_stream_;
  // Stages 2-3 without offload_param on CUDA: a unit's gradients go into its reduce-scatter's
  // buffer (flat_grads, the widening to fp32) and the reduce-scatter is issued on a stream of
  // their own (the reduce stream), after what the compute stream has queued, so that the widening
  // runs beside the next layer's backward (14 ms a step of the 7B shape on 2 GPUs). Elsewhere
  // `reduce` runs as it is.
  void on_reduce_stream(const unit& u, const std::function<void()>& reduce);
  std::optional<c10::Stream> reduce_stream_;
  // host_weights is about to change (an update, a load): every kept device copy is stale.
  void host_weights_changing();
  int parts() const { return options_.stage == 0 ? 1 : group_.size(); }
  int part() const { return options_.stage == 0 ? 0 : group_.rank(); }
  // Whether step() updates with cohort's AdamW kernel: the optimizer on a GPU (no offload) and
  // the build's kernels for its masters.
  bool kernel_update() const;
  // Whether the gradient shards stay in the compute dtype: one rank, stage 0-1 (one reduction a
  // step, after the last micro-batch), the update by cohort's AdamW kernel (kernel_update).
  // Nothing is summed across ranks then, and the kernels read bf16 as they would read its exact
  // fp32 copy: the same update, with half the gradient's bytes written and read.
  bool grads_in_compute_dtype() const;
  // (parts * shard) on the device, fp32 (or the compute dtype, grads_in_compute_dtype): the
  // gradients accumulated in unit u's weights.
  // With weight_grads_in_buffer the unit's buffer the GEMMs wrote (unit::sunk), its other slots
  // filled, handed over (sunk_grads); else a new buffer of the weights' .grad (param_grads). The
  // padding past the unit's elements is zeroed either way.
  torch::Tensor flat_grads(unit& u);
  torch::Tensor sunk_grads(unit& u);
  torch::Tensor param_grads(const unit& u) const;
  // Slot s's part of `flat`: its parameter's .grad (in flat's dtype), or zeros where it has none.
  static void put_grad(torch::Tensor& flat, const slot& s);
  torch::ScalarType flat_dtype() const;  // flat_grads' dtype
  // Device gradient shards: `part` (shard) becomes u.grad at the step's first reduction (a copy
  // if it views a bigger buffer), and is added to it after.
  void add_to_grad(unit& u, const torch::Tensor& part);
  // u.grad, or zeros where nothing was reduced into it this step.
  torch::Tensor grad_or_zeros(const unit& u) const;
  // (parts * shard) in dtype on device: every rank's master shard.
  torch::Tensor gather_full(const unit& u, torch::ScalarType dtype);
  // Orders the compute stream after `w` (CUDA) and remembers it for synchronize(); waits on the
  // host elsewhere.
  void complete(const std::shared_ptr<comm::work>& w);
  struct pending_gather {
    std::size_t unit = 0;
    std::shared_ptr<comm::work> work;  // null on one rank (a local copy)
    torch::Tensor shard;  // the collective's input, kept alive until the work completes
    std::function<void()> join;  // fill_on_uploads': orders the compute stream after the fill
  };
  // Stages 0-2: unit u's buffer (the model's weights) from every rank's `shard` (this rank's,
  // compute dtype, on the device): an all-gather into it, a copy on one part (none when `shard`
  // is the buffer itself).
  void fill_full(unit& u, const torch::Tensor& shard);
  // Stage 3: allocates unit u's buffer and starts filling it (all-gather, or a copy on one rank).
  pending_gather start_gather(std::size_t u);
  void allocate_full(unit& u);
  void free_full(unit& u);
  // (shard) in dtype on the device: this rank's weights of unit u, for a gather.
  torch::Tensor device_shard(const unit& u, torch::ScalarType dtype) const;
  // A zeroed host tensor of n elements, pinned when the device is a GPU (fast, async copies), in
  // exactly its size (whole pages) rather than torch's pinned blocks rounded up to powers of two;
  // first touched by the threads of the host update (model::host_zero).
  torch::Tensor host_tensor(std::int64_t n, torch::ScalarType dtype) const;

  // CUDA: before the host allocates for another gather or reduction it waits until fewer than
  // max_in_flight of the earlier ones are unfinished (FSDP's limit_all_gathers). Otherwise the
  // host queues a whole step ahead of the GPU and every queued collective's buffers stay
  // reserved (the caching allocator keeps a block the communication stream used until that
  // stream is past it): a 7B model on 4 GPUs with offload_param peaked at 12.8 GiB instead of
  // 5.0. Two in flight keep the compute stream a layer ahead of the host's waits and the
  // communication overlapped.
  static constexpr std::size_t max_in_flight = 2;
  void throttle();
  // The host update of one unit from `grad` (clipping by coef, AdamW, with offload_param the
  // compute-dtype copy into `copy`); what step() runs for each unit on the host, here or on
  // updates_.
  void update_on_host(unit& u, const model::adamw_options& options, double coef, const torch::Tensor& grad,
                      const torch::Tensor& copy);
  // Overlapped, not delayed: until the update of unit u (or of every unit) is done, before the
  // step reads what it writes. At once otherwise: without overlap nothing is in flight, and a
  // delayed update touches only the spare pair.
  void wait_updated(std::size_t u) const {
    if (updates_ && !delayed_in_flight_) updates_->wait(u);
  }
  void wait_all_updated() const {
    if (updates_ && !delayed_in_flight_) updates_->wait_all();
  }
  // Before master(u) or adam(u) is read or written: the end of a delayed update's delay
  // (settle_delayed), else wait_updated(u); and the update left to unit u's next gather.
  void settle(std::size_t u) {
    if (delayed_in_flight_) {
      settle_delayed();
    } else {
      wait_updated(u);
    }
    finish_left_update(units_.at(u));
  }
  // Before every unit's master and moments are read or written: settle() for all of them.
  void settle_all() {
    finish_left_updates();
    settle_delayed();
    wait_all_updated();
  }
  // update_at_next_gather: the update the last step() left to the units' next gathers
  // (zero_options), which every unit whose update_pending is set reads.
  struct left_update {
    model::adamw_options options;
    double coef = 1.0;          // the clipping coefficient, where the host knows it
    torch::Tensor device_coef;  // else on the device (0-dim fp64), undefined for coef
  };
  std::optional<left_update> left_update_;
  bool leaves_update() const;  // whether step() leaves the update to the gathers
  // Unit u's left update on the current stream, the updated shard rounded into `copy` where
  // defined; its gradient shard goes. Nothing where none is pending.
  void finish_left_update(unit& u, const torch::Tensor& copy = {});
  void finish_left_updates();  // every unit's, on the compute stream
  // An empty unit (unit 0 of a LoRA model, its embeddings frozen) has nothing to update, but its
  // step count follows the others' (checkpoints read unit 0's): step() adds one for it at its end,
  // whichever update ran, on the calling thread (the host update's thread never touches it).
  void count_empty_steps();
  // Waits for the delayed update in flight and gives its weights to the next step (each unit's
  // weights' copy from its spare). Nothing without one.
  void settle_delayed();
  // Hands the host update to updates_: delayed (into the spare pair) once delay_after updates
  // were made, else overlapped.
  void start_host_update(const model::adamw_options& options, double coef);
  bool delayed_in_flight_ = false;  // the update started last is delayed and not settled
  void track(const std::shared_ptr<comm::work>& w);

  // Stages 2-3 without offload_param: a unit's reduce-scatter is left to run while the backward
  // goes on. Its shard is added into the unit's gradient shard, and the compute stream made to
  // wait for it, only at the next reduction or at synchronize(): waiting at once held every
  // layer's backward behind the reduce-scatter of the layer above (12 ms exposed in a 1.1B step of
  // 230 on 2 GPUs). At most one is pending, so a unit's additions keep their order.
  struct pending_reduction {
    std::size_t unit = 0;
    torch::Tensor shard;  // this rank's part of the sum, once `work` is done
    std::shared_ptr<comm::work> work;
  };
  std::optional<pending_reduction> pending_reduction_;
  void finish_pending_reduction();
  void clear_param_grads(unit& u);  // the weights' .grad, reduced

  // reduce_grads' three ways, by stage and offload_param:
  // stages 0-1: the whole flat gradient all-reduced, this rank's part added into the shard
  // (alone, with grads_in_compute_dtype, the slots' .grad kept as u.grad_parts instead where
  // kept_as_parts);
  void all_reduce_into_grad(unit& u);
  bool kept_as_parts(const unit& u) const;
  // The kernel update's targets for u: the unit whole, or one a slot with u.grad_parts (their
  // AdamW states, in `states`, views of the unit's moments and copies of its step count, which
  // is counted here).
  void add_update_targets(unit& u, std::vector<model::fused_adamw_target>& targets,
                          std::deque<model::adamw_state>& states, const torch::Tensor& copy);
  // stages 2-3 on the device: reduce-scattered on the reduce stream, left pending (above);
  void reduce_scatter_pending(std::size_t index);
  // stages 2-3 with offload_param: reduce-scattered, then to the host's gradient shard, summed on
  // the device first where sum_grads_on_device (`last`: the step's last micro-batch).
  void reduce_scatter_to_host(std::size_t index, bool last);

  // offload_param, a step's later micro-batches whose sum stays off the device: the reduced
  // shard is copied into one of two pinned staging buffers without waiting, and added into the
  // unit's host gradient once that buffer is needed again or the step's gradients are read
  // (synchronize()). The host waits for a copy one reduction late instead of at once (when the
  // device has long finished it), and no buffer is allocated per reduction.
  struct deferred_add {
    std::size_t unit = 0;
    torch::Tensor staged;               // a view of a staging buffer
    std::function<void()> wait_copied;  // returns once the copy into `staged` is done
  };
  void add_to_host_grad(std::size_t index, const torch::Tensor& shard);
  // Copies a device gradient shard `from` into pinned host memory `to` without waiting: on CUDA on
  // a stream of its own, after what the compute stream has queued so far (so the backward goes
  // on while the copy engine moves it), `from`'s memory kept from reuse until the copy is done.
  // Returns what waits for the copy. synchronize() waits for every one. On a CPU: a plain copy.
  std::function<void()> copy_to_host(torch::Tensor to, const torch::Tensor& from);
  std::optional<c10::Stream> grad_copy_stream_;  // CUDA: the gradient shards' copies to the host
  // The oldest deferred add: waits for its copy, adds it. finish_adds(): all of them.
  void finish_oldest_add();
  void finish_adds();
  std::vector<torch::Tensor> grad_staging_;  // fp32, pinned on CUDA, the largest shard each
  // offload_param: each unit's gradient square sum (0-dim fp64), taken on the device from the
  // shard that goes to the host when that shard is the unit's whole gradient of the step (its
  // only reduction, or the last one of a sum kept on the device); undefined where the sum is made
  // on the host. grad_square_sum() adds them in unit order when every reduced unit has one,
  // instead of reading every host gradient again (4 bytes a parameter of host memory traffic
  // before the update can start). On a CPU the same values as that pass over the host gradients.
  std::vector<torch::Tensor> device_squares_;
  // The sum of the squares of a gradient shard, fp64 on its device, the host never waiting: one
  // kernel on CUDA, the host pass of grad_square_sum() on a CPU.
  static torch::Tensor square_sum(const torch::Tensor& shard);
  std::size_t next_staging_ = 0;
  std::deque<deferred_add> deferred_adds_;  // oldest first, at most one a staging buffer

  comm::process_group& group_;
  zero_options options_;
  wait_function wait_;
  torch::Device opt_device_;
  std::vector<unit> units_;
  std::vector<pending_gather> pending_;
  std::vector<std::shared_ptr<comm::work>> unchecked_;  // stream-ordered, not yet host-checked
  std::deque<std::shared_ptr<comm::work>> in_flight_;   // CUDA: throttled collectives, oldest first
  std::vector<std::pair<std::size_t, std::size_t>> order_;  // hf_parameters() index -> (unit, slot)
  std::int64_t parameter_count_ = 0;
  std::int64_t gathered_bytes_ = 0;
  std::int64_t gathered_peak_bytes_ = 0;
  // offload_param with overlap_host_update: runs step()'s host updates. Last: destroyed first,
  // once its updates are done, while the units they write still exist.
  std::unique_ptr<unit_update_thread> updates_;
};

}  // namespace cohort::core::train

// zero_optimizer: unit shards, gradient reduction, the sharded AdamW step and gathering.
#include "core/train/zero_optimizer.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>

#include <c10/core/DeviceGuard.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#ifdef COHORT_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "core/model/fused_ops.hpp"

namespace cohort::core::train {

zero_optimizer::zero_optimizer(const std::vector<model::hf_parameter>& params,
                               const model::weight_source& initial, comm::process_group& group,
                               const zero_options& options, wait_function wait)
    : group_(group),
      options_(options),
      wait_(std::move(wait)),
      opt_device_(options.offload || options.offload_param ? torch::Device(torch::kCPU) : options.device) {
  if (options.stage < 0 || options.stage > 3)
    throw std::invalid_argument("zero.stage: " + std::to_string(options.stage) +
                                " is not a ZeRO stage (allowed: 0, 1, 2, 3)");
  if (options.delayed_update && !(options.offload_param && options.overlap_host_update))
    throw std::invalid_argument(
        "zero.delayed_param_update: needs zero.offload_param \"cpu\" (the update is "
        "delayed only on the host, beside the next step)");
  if (options.offload_param && options.stage != 3)
    throw std::invalid_argument("zero.offload_param: \"cpu\" needs zero.stage 3 (got " +
                                std::to_string(options.stage) + "); below it every rank keeps whole weights");
  if (options.param_shard_units_kept_on_device < 0)
    throw std::invalid_argument("zero_options::param_shard_units_kept_on_device: " +
                                std::to_string(options.param_shard_units_kept_on_device) +
                                " is negative (a number of units, 0 for none)");
  for (const auto& p : params) {
    const auto u = layer_unit(p.layer);
    if (u >= units_.size()) units_.resize(u + 1);
    auto& un = units_[u];
    order_.emplace_back(u, un.slots.size());
    un.slots.push_back({p.name, p.tensor, p.tensor.sizes().vec(), un.numel, p.tensor.numel()});
    un.numel += p.tensor.numel();
    parameter_count_ += p.tensor.numel();
  }
  torch::NoGradGuard no_grad;
  const auto on_device = torch::TensorOptions().dtype(torch::kFloat).device(options_.device);
  for (std::size_t i = 0; i < units_.size(); ++i) {
    auto& u = units_[i];
    u.shard = (u.numel + parts() - 1) / parts();
    // This rank's elements [part * shard, (part + 1) * shard) of the unit, read slot by slot;
    // the padding past the unit's end stays 0.
    u.master = torch::empty({u.shard}, torch::kFloat);
    model::host_zero(u.master);  // first touched as the host update splits it
    const std::int64_t begin = part() * u.shard, end = begin + u.shard;
    for (const auto& s : u.slots) {
      const std::int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
      if (lo >= hi) continue;
      auto piece = u.master.narrow(0, lo - begin, hi - lo);
      initial.read(s.name, lo - s.offset, piece);
    }
    u.master = u.master.to(opt_device_);
    // On the device the gradient shard exists from a step's first reduction to its update.
    if (options_.offload_param) {
      u.grad = host_tensor(u.shard, torch::kFloat);
      u.host_weights = host_tensor(u.shard, options_.compute_dtype);
      u.host_weights.copy_(u.master);
      if (options_.delayed_update) {
        u.spare_grad = host_tensor(u.shard, torch::kFloat);
        u.spare_weights = host_tensor(u.shard, options_.compute_dtype);
        u.spare_weights.copy_(u.master);
      }
    }
    // The parameters become views of the unit's buffer for good (a layer's weights lie one after
    // another: the fused q/k/v and gate/up GEMMs read them in place). Stage 3 frees its storage
    // until the first gather; stages 0-2 fill it now and after each update.
    u.full = torch::empty({parts() * u.shard}, on_device.dtype(options_.compute_dtype));
    for (auto& s : u.slots) s.param.set_data(u.full.narrow(0, s.offset, s.numel).view(s.shape));
    if (options_.stage == 3) {
      u.gathered = true;
      gathered_bytes_ += static_cast<std::int64_t>(u.full.storage().nbytes());
      release(i);
    } else {
      fill_full(u, device_shard(u, options_.compute_dtype));
    }
  }
  synchronize();
  gathered_peak_bytes_ = gathered_bytes_;
  if (options_.offload_param && options_.overlap_host_update)
    updates_ = std::make_unique<unit_update_thread>();
  if (options_.weight_grads_in_buffer && options_.stage == 3 && !options_.offload_param) {
    sink_ = std::make_unique<grad_sink>(*this);  // last: nothing after it throws
    model::add_weight_grad_sink(sink_.get());
  }
}

zero_optimizer::~zero_optimizer() {
  if (sink_) model::remove_weight_grad_sink(sink_.get());
}

model::weight_grad_target zero_optimizer::sink_target(const torch::Tensor& weights) {
  if (weights.dim() != 2 || !weights.is_contiguous() || weights.scalar_type() != options_.compute_dtype ||
      weights.device() != options_.device)
    return {};
  // A unit's buffer keeps its storage object for good (gathers swap only its bytes), and so do
  // the parameters that view it: which unit the weights are in is read from fields no other
  // thread writes (the sinks of other ranks' optimizers in this process look too).
  const auto* storage = weights.storage().unsafeGetStorageImpl();
  for (auto& u : units_) {
    if (u.numel == 0 || u.full.storage().unsafeGetStorageImpl() != storage) continue;
    const std::int64_t begin = weights.storage_offset() - u.full.storage_offset(),
                       end = begin + weights.numel();
    // The slots the range covers, whole: [first, last).
    std::size_t first = 0;
    while (first < u.slots.size() && u.slots[first].offset < begin) ++first;
    if (first == u.slots.size() || u.slots[first].offset != begin) return {};
    std::size_t last = first;
    while (last < u.slots.size() && u.slots[last].offset + u.slots[last].numel <= end) ++last;
    if (last == first || u.slots[last - 1].offset + u.slots[last - 1].numel != end) return {};
    if (!u.sunk.defined()) {
      u.sunk = torch::empty({parts() * u.shard},
                            torch::TensorOptions().dtype(torch::kFloat).device(options_.device));
      u.written.assign(u.slots.size(), false);
    }
    bool any = false;
    for (std::size_t i = first; i < last; ++i) any = any || u.written[i];
    for (std::size_t i = first; i < last; ++i) {
      if (any && !u.written[i]) u.sunk.narrow(0, u.slots[i].offset, u.slots[i].numel).zero_();
      u.written[i] = true;
    }
    return {u.sunk.narrow(0, begin, end - begin).view(weights.sizes()), any};
  }
  return {};
}

namespace {

#ifdef COHORT_WITH_CUDA
// `n` zeroed elements of page-locked host memory of exactly their size (whole pages): torch's
// pinned allocator rounds every block up to a power of two, up to a third more host RAM for a
// unit's shard. Registered with CUDA, so copies from and to the GPU stay asynchronous; touched
// first by the threads of the host update (host_zero), as registering would place every page on
// the caller's NUMA node.
torch::Tensor exactly_pinned(std::int64_t n, torch::ScalarType dtype) {
  const std::size_t page = 4096;
  const std::size_t bytes = (static_cast<std::size_t>(n) * c10::elementSize(dtype) + page - 1) / page * page;
  void* memory = std::aligned_alloc(page, std::max(bytes, page));
  if (memory == nullptr) throw std::bad_alloc();
  model::host_zero(torch::from_blob(memory, {n}, torch::TensorOptions().dtype(dtype)));
  if (bytes > 0 && cudaHostRegister(memory, bytes, cudaHostRegisterDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    std::free(memory);
    return torch::zeros({n}, torch::TensorOptions().dtype(dtype).pinned_memory(true));  // torch's, rounded
  }
  return torch::from_blob(
      memory, {n},
      [bytes](void* p) {
        if (bytes > 0) cudaHostUnregister(p);
        std::free(p);
      },
      torch::TensorOptions().dtype(dtype));
}
#endif

}  // namespace

torch::Tensor zero_optimizer::host_tensor(std::int64_t n, torch::ScalarType dtype) const {
#ifdef COHORT_WITH_CUDA
  if (options_.device.is_cuda()) return exactly_pinned(n, dtype);
#endif
  auto t = torch::empty({n}, torch::TensorOptions().dtype(dtype));
  model::host_zero(t);
  return t;
}

bool zero_optimizer::kernel_update() const {
  return opt_device_.is_cuda() && std::any_of(units_.begin(), units_.end(), [](const unit& u) {
           return u.numel > 0 && model::fused_kernels_available(u.master);
         });
}

bool zero_optimizer::grads_in_compute_dtype() const {
  return group_.size() == 1 && options_.stage <= 1 && kernel_update();
}

torch::ScalarType zero_optimizer::flat_dtype() const {
  return grads_in_compute_dtype() ? options_.compute_dtype : torch::kFloat;
}

void zero_optimizer::put_grad(torch::Tensor& flat, const slot& s) {
  auto place = flat.narrow(0, s.offset, s.numel);
  const torch::Tensor& g = s.param.grad();
  if (g.defined()) {
    place.copy_(g.detach().reshape({-1}));
  } else {
    place.zero_();
  }
}

torch::Tensor zero_optimizer::flat_grads(unit& u) {
  auto flat = u.sunk.defined() ? sunk_grads(u) : param_grads(u);
  flat.narrow(0, u.numel, parts() * u.shard - u.numel).zero_();  // the padding
  return flat;
}

torch::Tensor zero_optimizer::sunk_grads(unit& u) {
  auto flat = std::move(u.sunk);  // the GEMMs' gradients are there; the other slots' come from .grad
  u.sunk = torch::Tensor();
  for (std::size_t i = 0; i < u.slots.size(); ++i)
    if (!u.written[i]) put_grad(flat, u.slots[i]);
  u.written.assign(u.slots.size(), false);
  return flat;
}

torch::Tensor zero_optimizer::param_grads(const unit& u) const {
  // One buffer, each gradient converted straight into its place (no fp32 copies to concatenate).
  const auto dtype = flat_dtype();
  const auto on_device = torch::TensorOptions().dtype(dtype).device(options_.device);
  auto flat = torch::empty({parts() * u.shard}, on_device);
  // Every gradient there, of the buffer's dtype, one after another: one concatenation (a launch
  // or two where a copy each left the GPU waiting between a unit's hundreds of small copies).
  // Compute-dtype gradients into an fp32 buffer likewise, through one widening launch where the
  // kernels run.
  std::vector<torch::Tensor> pieces;
  std::int64_t end = 0;
  const auto first = u.slots.empty() ? torch::Tensor() : u.slots.front().param.grad();
  const bool widen = dtype == torch::kFloat && first.defined() && first.scalar_type() != dtype &&
                     model::fused_kernels_available(first);
  for (const auto& s : u.slots) {
    const torch::Tensor& g = s.param.grad();
    if (!g.defined() || g.scalar_type() != (widen ? first.scalar_type() : dtype) || s.offset != end ||
        (widen && !g.is_contiguous()))
      break;
    pieces.push_back(g.detach().reshape({-1}));
    end += s.numel;
  }
  if (pieces.size() == u.slots.size() && !pieces.empty()) {
    auto whole = flat.narrow(0, 0, end);
    if (widen) {
      model::fused_widen_into(pieces, whole);
    } else {
      at::cat_out(whole, pieces, 0);
    }
  } else {
    for (const auto& s : u.slots) put_grad(flat, s);
  }
  return flat;
}

torch::Tensor zero_optimizer::device_shard(const unit& u, torch::ScalarType dtype) const {
  // From pinned memory the copy is asynchronous on the compute stream; the collective that
  // gathers it is ordered after it.
  if (options_.offload_param && dtype == options_.compute_dtype)
    return u.host_weights.to(options_.device, /*non_blocking=*/true);
  return u.master.to(options_.device, dtype);
}

#ifdef COHORT_WITH_CUDA
namespace {
// The stream kept in `slot` (taken from the pool on first use) on `device`.
c10::cuda::CUDAStream stream_in(std::optional<c10::Stream>& slot, c10::DeviceIndex device) {
  if (!slot) slot = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
  return c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, *slot);
}

// Runs `work` with the stream in `slot` current, after that stream waits for what `device`'s
// compute (current) stream has queued so far, the memory of each defined tensor of `used` kept
// from reuse until the stream is past it. Returns the event recorded on the stream after `work`.
std::shared_ptr<at::cuda::CUDAEvent> after_compute_on(std::optional<c10::Stream>& slot,
                                                      c10::DeviceIndex device,
                                                      const std::vector<torch::Tensor>& used,
                                                      const std::function<void()>& work) {
  const auto side = stream_in(slot, device);
  at::cuda::CUDAEvent queued;
  queued.record(c10::cuda::getCurrentCUDAStream(device));
  queued.block(side);
  for (const auto& t : used)
    if (t.defined()) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), side);
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    work();
  }
  auto done = std::make_shared<at::cuda::CUDAEvent>();
  done->record(side);
  return done;
}
}  // namespace
#endif

torch::Tensor zero_optimizer::gather_shard(std::size_t u) {
  auto& un = units_.at(u);
  if (!options_.offload_param) return device_shard(un, options_.compute_dtype);
  if (!kept_on_device(u)) {
#ifdef COHORT_WITH_CUDA
    std::optional<c10::cuda::CUDAStreamGuard> on_uploads;  // see fill_on_uploads
    if (options_.device.is_cuda()) on_uploads.emplace(stream_in(upload_stream_, options_.device.index()));
#endif
    return device_shard(un, options_.compute_dtype);
  }
  if (!un.device_weights_fresh) {
    torch::NoGradGuard no_grad;
    if (!un.device_weights.defined())
      un.device_weights =
          torch::empty({un.shard}, un.host_weights.options().device(options_.device).pinned_memory(false));
    un.device_weights.copy_(un.host_weights, /*non_blocking=*/true);
    un.device_weights_fresh = true;
  }
  return un.device_weights;
}

void zero_optimizer::host_weights_changing() {
  for (auto& u : units_) u.device_weights_fresh = false;
}

std::int64_t zero_optimizer::kept_shard_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& u : units_)
    if (u.device_weights.defined()) bytes += static_cast<std::int64_t>(u.device_weights.nbytes());
  return bytes;
}

torch::Tensor zero_optimizer::gather_full(const unit& u, torch::ScalarType dtype) {
  if (parts() > 1 && u.numel > 0) throttle();
  auto shard = device_shard(u, dtype);
  if (parts() == 1 || u.numel == 0) return shard;  // an empty unit needs no collective
  auto full = torch::empty({parts() * u.shard}, shard.options());
  auto w = group_.all_gather(shard, full);
  track(w);
  complete(w);
  return full;
}

void zero_optimizer::throttle() {
  if (!options_.device.is_cuda()) return;
  while (!in_flight_.empty() && in_flight_.front()->is_completed()) in_flight_.pop_front();
  while (in_flight_.size() >= max_in_flight) {
    wait_(in_flight_.front());  // errors surface here or in synchronize()
    in_flight_.pop_front();
  }
}

void zero_optimizer::track(const std::shared_ptr<comm::work>& w) {
  if (options_.device.is_cuda()) in_flight_.push_back(w);
}

void zero_optimizer::complete(const std::shared_ptr<comm::work>& w) {
  if (!options_.device.is_cuda()) {
    wait_(w);
    return;
  }
  w->wait_stream(group_.timeout());
  unchecked_.push_back(w);
}

void zero_optimizer::synchronize() {
  finish_pending_reduction();
  auto works = std::move(unchecked_);
  unchecked_.clear();
  in_flight_.clear();  // all waited for below
  for (const auto& w : works) wait_(w);
  finish_adds();
  if (!options_.offload_param) return;
  for (auto& u : units_) {  // a sum on the device whose last reduction did not say so
    if (!u.device_grad_sum.defined()) continue;
    u.grad.copy_(u.device_grad_sum, /*non_blocking=*/true);
    u.grad_pending = false;
    u.device_grad_sum = torch::Tensor();
  }
  // Every stream of the device: the compute stream's work, the gradient shards' copies to the
  // host and the gathers' copies up.
  if (options_.device.is_cuda()) torch::cuda::synchronize(options_.device.index());
  for (std::size_t i = 0; i < units_.size(); ++i) {
    auto& u = units_[i];
    if (u.grad_pending) {  // nothing reduced into it this step
      wait_updated(i);     // the last update read it
      u.grad.zero_();
    }
    u.grad_pending = false;
  }
}

void zero_optimizer::fill_full(unit& u, const torch::Tensor& shard) {
  torch::NoGradGuard no_grad;
  if (u.numel == 0) return;
  if (parts() == 1) {
    if (shard.data_ptr() != u.full.data_ptr()) u.full.copy_(shard);  // else written in place
    return;
  }
  throttle();
  auto w = group_.all_gather(shard, u.full);
  track(w);
  complete(w);
}

// The storage of a unit's buffer is swapped for a fresh allocation from its own allocator (the
// caching allocator on CUDA, on the current stream) and back to nothing: every tensor that views
// it (the parameters, and whatever views of them autograd saved) follows, since they share the
// storage object. This is what `storage().resize_(0)` does in Python's FSDP2; libtorch's C++
// storage resize is one function per device (resize_bytes_cpu, resize_bytes_cuda in another
// library), while the allocator that made the storage serves any device.
void zero_optimizer::allocate_full(unit& u) {
  auto* storage = u.full.storage().unsafeGetStorageImpl();
  const auto nbytes = static_cast<std::size_t>(u.full.numel()) * u.full.element_size();
  if (storage->nbytes() == nbytes) return;
  if (storage->allocator() == nullptr)
    throw std::logic_error("zero_optimizer: a gathered unit's buffer has no allocator");
  // The CUDA allocator serves the calling thread's current device, which need not be this
  // rank's (ranks may be threads of one process).
  const c10::DeviceGuard on_device(u.full.device());
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
  gathered_bytes_ += static_cast<std::int64_t>(nbytes);
  gathered_peak_bytes_ = std::max(gathered_peak_bytes_, gathered_bytes_);
}

void zero_optimizer::free_full(unit& u) {
  auto* storage = u.full.storage().unsafeGetStorageImpl();
  gathered_bytes_ -= static_cast<std::int64_t>(storage->nbytes());
  // On CUDA the caching allocator hands the block out again only to work ordered after what the
  // compute stream queued so far, and after the collective that filled it (NCCL records its
  // stream on the block).
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, u.full.device()));
  storage->set_nbytes(0);
}

zero_optimizer::pending_gather zero_optimizer::start_gather(std::size_t u) {
  auto& un = units_.at(u);
  throttle();
  wait_updated(u);  // its weights' copy is the last update's
  pending_gather p;
  p.unit = u;
  // Without offload_param on a GPU the shard is cast to the compute dtype straight into this
  // rank's part of the buffer, on the gathers' stream, off the compute stream, and the all-gather
  // runs in place (with one part that part is the buffer): no separate shard, and no copy of it
  // into the buffer (1.8% of the 7B shape's step on 2 GPUs).
  // A unit's update left to this gather (zero_options::update_at_next_gather) is that cast: it
  // writes the updated shard there in the same pass.
  const bool cast_in_fill = !options_.offload_param && options_.device.is_cuda() && un.numel > 0;
  if (!cast_in_fill) {
    finish_left_update(un);
    p.shard = gather_shard(u);
  }
  allocate_full(un);
  un.gathered = true;
  if (un.numel == 0) return p;  // nothing to gather (unit 0 of a LoRA model)
  std::vector<torch::Tensor> used{un.full};
  if (un.update_pending) used.insert(used.end(), {un.grad, left_update_->device_coef});
  p.join = fill_on_uploads(
      [&] {
        torch::NoGradGuard no_grad;
        if (cast_in_fill) {
          p.shard = un.full.narrow(0, part() * un.shard, un.shard);
          if (un.update_pending) {
            finish_left_update(un, p.shard);
          } else {
            p.shard.copy_(un.master);
          }
        }
        if (parts() > 1) {
          p.work = group_.all_gather(p.shard, un.full);
        } else if (!cast_in_fill) {
          un.full.copy_(p.shard);
        }
      },
      used);
  if (p.work) track(p.work);
  return p;
}

std::function<void()> zero_optimizer::fill_on_uploads(const std::function<void()>& fill,
                                                      const std::vector<torch::Tensor>& used) {
#ifdef COHORT_WITH_CUDA
  if (options_.device.is_cuda()) {
    const auto device = options_.device.index();
    const auto filled = after_compute_on(upload_stream_, device, used, fill);
    return [filled, device] { filled->block(c10::cuda::getCurrentCUDAStream(device)); };
  }
#endif
  (void)used;
  fill();
  return {};
}

void zero_optimizer::on_reduce_stream(const unit& u, const std::function<void()>& reduce) {
#ifdef COHORT_WITH_CUDA
  if (options_.device.is_cuda()) {
    // The weights' gradients, read there, go back to the allocator when the unit's reduction
    // returns: none of their blocks is handed to the compute stream before this stream is past them.
    std::vector<torch::Tensor> grads{u.sunk};  // made on the compute stream, read by this one
    for (const auto& s : u.slots) grads.push_back(s.param.grad());
    after_compute_on(reduce_stream_, options_.device.index(), grads, reduce);
    return;
  }
#endif
  (void)u;
  reduce();
}

void zero_optimizer::prefetch(std::size_t u) {
  if (options_.stage != 3 || u >= units_.size() || units_[u].gathered) return;
  pending_.push_back(start_gather(u));
}

void zero_optimizer::gather(std::size_t u) {
  if (options_.stage != 3) return;
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->unit != u) continue;
    auto p = std::move(*it);
    pending_.erase(it);
    if (p.join) p.join();
    if (p.work) complete(p.work);
    return;
  }
  if (units_.at(u).gathered) return;
  auto p = start_gather(u);
  if (p.join) p.join();
  if (p.work) complete(p.work);
}

void zero_optimizer::release(std::size_t u) {
  if (options_.stage != 3) return;
  auto& un = units_.at(u);
  // A prefetch still filling the buffer finishes first: its collective writes into the storage.
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->unit != u) continue;
    if (it->work) wait_(it->work);
    if (it->join) it->join();  // the compute stream's next use of the freed block comes after
    pending_.erase(it);
    break;
  }
  free_full(un);
  un.gathered = false;
}

void zero_optimizer::zero_grad_shards() {
  deferred_adds_.clear();  // a step cut short: its later micro-batches' sums are not wanted
  device_squares_.assign(units_.size(), torch::Tensor());
  for (auto& u : units_) {
    u.sunk = torch::Tensor();  // a step cut short: what its GEMMs wrote is not wanted
    u.grad_parts.clear();
    if (u.update_pending) continue;  // its gradient shard is the last step's, for its update
    if (options_.offload_param) {
      u.grad_pending = true;  // the first reduction overwrites it (see reduce_grads)
    } else {
      u.grad = torch::Tensor();  // the first reduction becomes it (see add_to_grad)
    }
  }
}

void zero_optimizer::reduce_grads(std::size_t index, bool last) {
  torch::NoGradGuard no_grad;
  auto& u = units_.at(index);
  if (u.numel == 0) return;  // nothing trains there (unit 0 of a LoRA model)
  throttle();
  wait_updated(index);        // offload_param: the last update read the gradient shard this writes
  finish_left_update(u);      // the last step's update reads the gradient shard this writes
  if (device_squares_.size() != units_.size()) device_squares_.assign(units_.size(), torch::Tensor());
  if (options_.stage <= 1) {
    all_reduce_into_grad(u);
  } else if (!options_.offload_param) {
    reduce_scatter_pending(index);
  } else {
    reduce_scatter_to_host(index, last);
  }
  clear_param_grads(u);
}

bool zero_optimizer::kept_as_parts(const unit& u) const {
  if (group_.size() != 1 || !grads_in_compute_dtype() || u.grad.defined() || !u.grad_parts.empty())
    return false;
  std::int64_t end = 0;
  for (const auto& s : u.slots) {
    const torch::Tensor& g = s.param.grad();
    if (!g.defined() || g.scalar_type() != options_.compute_dtype || !g.is_contiguous() ||
        g.device() != options_.device || g.numel() != s.numel || s.offset != end ||
        !model::fused_kernels_available(g))
      return false;
    end += s.numel;
  }
  return !u.slots.empty();
}

void zero_optimizer::all_reduce_into_grad(unit& u) {
  if (kept_as_parts(u)) {  // one reduction a step, alone: the sum is the .grad as it is
    for (const auto& s : u.slots) u.grad_parts.push_back(s.param.grad().detach().view({-1}));
    return;
  }
  auto flat = flat_grads(u);  // (parts * shard)
  if (group_.size() > 1) {    // alone, the sum over ranks is this rank's gradient
    auto w = group_.all_reduce(flat, comm::reduce_op::sum);
    track(w);
    complete(w);
  }
  add_to_grad(u, flat.narrow(0, part() * u.shard, u.shard));
}

void zero_optimizer::reduce_scatter_pending(std::size_t index) {
  auto& u = units_[index];
  finish_pending_reduction();  // the one before, long done: its wait costs the device nothing
  auto mine = torch::empty({u.shard}, torch::TensorOptions().dtype(flat_dtype()).device(options_.device));
  std::shared_ptr<comm::work> w;
  on_reduce_stream(u, [&] { w = group_.reduce_scatter(flat_grads(u), mine, comm::reduce_op::sum); });
  track(w);
  pending_reduction_ = pending_reduction{index, mine, w};
}

void zero_optimizer::reduce_scatter_to_host(std::size_t index, bool last) {
  auto& u = units_[index];
  auto flat = flat_grads(u);  // (parts * shard)
  auto mine = torch::empty({u.shard}, flat.options());
  auto w = group_.reduce_scatter(flat, mine, comm::reduce_op::sum);
  track(w);
  complete(w);
  if (options_.sum_grads_on_device && (!last || u.device_grad_sum.defined())) {
    // Summed on the device; the last micro-batch's sum goes to the host as a first reduction's
    // shard does (the same additions in the same order as on the host, so the same sum).
    u.device_grad_sum = u.device_grad_sum.defined() ? u.device_grad_sum.add_(mine) : mine;
    if (last) {
      device_squares_[index] = square_sum(u.device_grad_sum);
      copy_to_host(u.grad, u.device_grad_sum);
      u.grad_pending = false;
      u.device_grad_sum = torch::Tensor();  // its block is kept until the copy is done
    }
  } else if (u.grad_pending) {  // the step's first reduction: an asynchronous copy to the host
    if (last) device_squares_[index] = square_sum(mine);
    copy_to_host(u.grad, mine);
    u.grad_pending = false;
  } else {  // a later micro-batch: added on the host (see deferred_add), and so is its square
    device_squares_[index] = torch::Tensor();
    add_to_host_grad(index, mine);
  }
}

void zero_optimizer::clear_param_grads(unit& u) {
  for (auto& s : u.slots) s.param.mutable_grad() = torch::Tensor();
}

void zero_optimizer::finish_pending_reduction() {
  if (!pending_reduction_) return;
  auto p = std::move(*pending_reduction_);
  pending_reduction_.reset();
  complete(p.work);
  add_to_grad(units_[p.unit], p.shard);
}

void zero_optimizer::add_to_host_grad(std::size_t index, const torch::Tensor& shard) {
  if (grad_staging_.empty()) {
    std::int64_t largest = 0;
    for (const auto& u : units_) largest = std::max(largest, u.shard);
    for (int i = 0; i < 2; ++i) grad_staging_.push_back(host_tensor(largest, torch::kFloat));
  }
  if (deferred_adds_.size() == grad_staging_.size()) finish_oldest_add();  // frees the next buffer
  auto staged = grad_staging_[next_staging_].narrow(0, 0, shard.numel());
  next_staging_ = (next_staging_ + 1) % grad_staging_.size();
  deferred_adds_.push_back({index, staged, copy_to_host(staged, shard)});
}

std::function<void()> zero_optimizer::copy_to_host(torch::Tensor to, const torch::Tensor& from) {
#ifdef COHORT_WITH_CUDA
  if (from.is_cuda()) {
    const auto copied = after_compute_on(grad_copy_stream_, from.device().index(), {from},
                                         [&] { to.copy_(from, /*non_blocking=*/true); });
    return [copied] { copied->synchronize(); };
  }
#endif
  to.copy_(from);
  return [] {};
}

void zero_optimizer::finish_oldest_add() {
  auto add = std::move(deferred_adds_.front());
  deferred_adds_.pop_front();
  add.wait_copied();  // also past the step's first copy into the gradient (one copy stream)
  units_[add.unit].grad.add_(add.staged);
}

void zero_optimizer::finish_adds() {
  while (!deferred_adds_.empty()) finish_oldest_add();
}

void zero_optimizer::add_to_grad(unit& u, const torch::Tensor& part) {
  if (u.grad.defined()) {
    u.grad.add_(part);
  } else {  // the step's first reduction; a part of a bigger buffer is copied so that it can go
    const auto whole = static_cast<std::int64_t>(part.storage().nbytes() / part.element_size());
    u.grad = part.numel() == whole ? part : part.clone();
  }
}

torch::Tensor zero_optimizer::grad_or_zeros(const unit& u) const {
  return u.grad.defined() ? u.grad : torch::zeros({u.shard}, u.master.options().device(options_.device));
}

torch::Tensor zero_optimizer::square_sum(const torch::Tensor& shard) {
  if (model::fused_kernels_available(shard)) return model::fused_square_sum(shard);
  if (shard.is_cpu() && shard.scalar_type() == torch::kFloat && shard.is_contiguous())
    return torch::scalar_tensor(model::host_square_sum(shard), torch::kDouble);
  return shard.to(torch::kDouble).pow(2).sum();
}

torch::Tensor zero_optimizer::grad_square_sum() const {
  if (options_.offload_param) {
    // Each unit's square taken where its shard was reduced (see device_squares_), when every
    // reduced unit has one: no pass over the host's gradients.
    bool all = device_squares_.size() == units_.size();
    for (std::size_t i = 0; all && i < units_.size(); ++i)
      all = units_[i].numel == 0 || units_[i].grad_pending || device_squares_[i].defined();
    if (all) {
      torch::Tensor sum;
      for (const auto& square : device_squares_)
        if (square.defined()) sum = sum.defined() ? sum + square : square;
      return sum.defined() ? sum : torch::zeros({}, torch::kDouble);
    }
  }
  if (options_.offload_param || options_.device.is_cpu()) {  // the gradients are in host memory
    wait_all_updated();
    double host = 0;
    for (const auto& u : units_)
      if (u.grad.defined()) host += model::host_square_sum(u.grad);
    return torch::scalar_tensor(host, torch::kDouble);
  }
  auto sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(options_.device));
  std::vector<torch::Tensor> kernel_grads;  // summed by one kernel each and one for them all
  for (const auto& u : units_) {
    kernel_grads.insert(kernel_grads.end(), u.grad_parts.begin(), u.grad_parts.end());
    // Nothing reduced into it this step: zero (with an update pending, `grad` is the last step's).
    if (!u.grad.defined() || u.update_pending) continue;
    if (model::fused_kernels_available(u.grad)) {
      kernel_grads.push_back(u.grad);
    } else {
      sum += u.grad.to(torch::kDouble).pow(2).sum();
    }
  }
  if (!kernel_grads.empty()) sum += model::fused_square_sum(kernel_grads);
  return sum;
}

void zero_optimizer::step(const model::adamw_options& options, const torch::Tensor& clip_coef) {
  torch::NoGradGuard no_grad;
  // A coefficient on the device stays there for a CUDA update; the host update reads it (a wait).
  const bool coef_on_device = clip_coef.defined() && !clip_coef.is_cpu() && opt_device_.is_cuda();
  const double coef_value = clip_coef.defined() && !coef_on_device ? clip_coef.item<double>() : 1.0;
  release_all();  // stage 3: what is still gathered would be stale after the update
  finish_left_updates();  // of units this step did not gather (their gradient shards are the last step's)
  if (leaves_update()) {  // to each unit's next gather (zero_options::update_at_next_gather)
    left_update_ =
        left_update{options, coef_value, coef_on_device ? clip_coef.to(opt_device_) : torch::Tensor()};
    for (auto& u : units_)
      if (u.numel > 0) u.update_pending = true;
  } else if (kernel_update()) {
    // The AdamW kernel on the units' shards: the clipping scale applied as the gradient is read,
    // and for stages 0-2 the compute-dtype shard that the gather reads written in the same pass.
    // With one part (stage 0, or one rank) one launch for every unit, writing straight into their
    // buffers; with several, one a unit, so that its all-gather runs while the next one updates.
    const auto device_coef = coef_on_device ? clip_coef.to(opt_device_) : torch::Tensor();
    const bool copy = options_.stage < 3 && options_.compute_dtype != torch::kFloat;
    std::vector<model::fused_adamw_target> together;
    std::deque<model::adamw_state> slot_states;  // grad_parts' targets' (pointers stay valid)
    for (auto& u : units_) {
      if (u.numel == 0) continue;  // see count_empty_steps()
      auto shard = !copy          ? torch::Tensor()
                   : parts() == 1 ? u.full
                                  : torch::empty({u.shard}, u.master.options().dtype(options_.compute_dtype));
      if (parts() == 1) {
        add_update_targets(u, together, slot_states, shard);
        continue;
      }
      model::fused_adamw_step({{u.master, grad_or_zeros(u), &u.adam, shard}}, options, coef_value,
                              device_coef);
      if (options_.stage < 3) fill_full(u, copy ? shard : u.master);
    }
    model::fused_adamw_step(together, options, coef_value, device_coef);
    if (parts() == 1 && options_.stage < 3)
      for (auto& u : units_) fill_full(u, copy ? u.full : u.master);  // u.full: written in place
  } else if (opt_device_.is_cuda()) {
    // Every unit's shard in one fused update.
    std::vector<torch::Tensor> masters, grads;
    std::vector<model::adamw_state*> states;
    for (auto& u : units_) {
      if (u.numel == 0) continue;  // see count_empty_steps()
      auto grad = grad_or_zeros(u);
      if (coef_on_device) {
        grad.mul_(clip_coef.to(grad.device()));
      } else if (coef_value != 1.0) {
        grad.mul_(coef_value);
      }
      masters.push_back(u.master);
      grads.push_back(grad);
      states.push_back(&u.adam);
    }
    model::adamw_step_many(masters, grads, states, options);
    if (options_.stage < 3)
      for (auto& u : units_) fill_full(u, device_shard(u, options_.compute_dtype));
  } else if (updates_) {
    start_host_update(options, coef_value);
  } else {
    if (options_.offload_param) host_weights_changing();
    for (auto& u : units_) {
      update_on_host(u, options, coef_value, options_.offload_param ? u.grad : grad_or_zeros(u),
                     options_.offload_param ? u.host_weights : torch::Tensor());
      if (options_.stage < 3 && u.numel > 0) fill_full(u, device_shard(u, options_.compute_dtype));
    }
  }
  count_empty_steps();
  // The gradient shards go until the next step's reductions (FSDP2's zero_grad(set_to_none)):
  // at the peak of a step, the start of its backward, most of them do not exist yet.
  if (!options_.offload_param) {
    for (auto& u : units_) {
      if (!u.update_pending) u.grad = torch::Tensor();  // else when its update is done
      u.grad_parts.clear();
    }
  }
  synchronize();
}

bool zero_optimizer::leaves_update() const {
  return options_.update_at_next_gather && options_.stage == 3 && parts() > 1 && !options_.offload_param &&
         options_.device.is_cuda() && kernel_update();
}

void zero_optimizer::finish_left_update(unit& u, const torch::Tensor& copy) {
  if (!u.update_pending) return;
  torch::NoGradGuard no_grad;
  const auto& left = *left_update_;
  model::fused_adamw_step({{u.master, grad_or_zeros(u), &u.adam, copy}}, left.options, left.coef,
                          left.device_coef);
  u.grad = torch::Tensor();  // its block is kept from reuse until the stream that read it is past it
  u.update_pending = false;
}

void zero_optimizer::count_empty_steps() {
  for (auto& u : units_)
    if (u.numel == 0) ++u.adam.step;
}

void zero_optimizer::finish_left_updates() {
  for (auto& u : units_) finish_left_update(u);
}

void zero_optimizer::add_update_targets(unit& u, std::vector<model::fused_adamw_target>& targets,
                                        std::deque<model::adamw_state>& states, const torch::Tensor& copy) {
  if (u.grad_parts.empty()) {
    targets.push_back({u.master, grad_or_zeros(u), &u.adam, copy});
    return;
  }
  if (!u.adam.exp_avg.defined()) {  // the unit's moments, which the slots' states view
    u.adam.exp_avg = torch::zeros_like(u.master);
    u.adam.exp_avg_sq = torch::zeros_like(u.master);
  }
  // The padding past the slots (zero weights, moments and gradients) stays zero, as the update of
  // a zero gradient leaves it.
  for (std::size_t i = 0; i < u.slots.size(); ++i) {
    const auto& s = u.slots[i];
    const auto part = [&](const torch::Tensor& t) { return t.narrow(0, s.offset, s.numel); };
    states.push_back({part(u.adam.exp_avg), part(u.adam.exp_avg_sq), u.adam.step});
    targets.push_back(
        {part(u.master), u.grad_parts[i], &states.back(), copy.defined() ? part(copy) : torch::Tensor()});
  }
  ++u.adam.step;  // the update steps each slot's copy of the count once: the unit's step
}

void zero_optimizer::update_on_host(unit& u, const model::adamw_options& options, double coef,
                                    const torch::Tensor& grad, const torch::Tensor& copy) {
  torch::NoGradGuard no_grad;
  if (u.numel == 0) return;  // see count_empty_steps()
  // One pass over the shard on the host, clipping included. With offload_optimizer the gradient
  // shard comes to the host first (and step() sends the new weights back to the device); with
  // offload_param the pass also writes the compute-dtype copy that the next gathers read.
  model::adamw_step_host(u.master, grad.to(opt_device_), u.adam, options, coef, copy);
}

void zero_optimizer::start_host_update(const model::adamw_options& options, double coef) {
  // offload_param: the gradient shards are on the host already and nothing of the update touches
  // the device. The last update is done (a delayed one a step's worth of work ago; an overlapped
  // one was waited for by this step's gathers).
  updates_->wait_all();
  host_weights_changing();
  const bool delay = options_.delayed_update && units_.front().adam.step >= options_.delay_after;
  if (!delay) {  // the next step's gathers wait for their units (see the header)
    updates_->start(units_.size(), [this, options, coef](std::size_t i) {
      auto& u = units_[i];
      update_on_host(u, options, coef, u.grad, u.host_weights);
    });
    return;
  }
  // Delayed: the spare weights, written by the last update when it was delayed too, are the next
  // step's; this step's gradients go to the update that starts now, which writes the other
  // weights' copy while the next step reads these (see zero_options::delayed_update).
  for (auto& u : units_) {
    if (delayed_in_flight_) std::swap(u.host_weights, u.spare_weights);
    std::swap(u.grad, u.spare_grad);
  }
  delayed_in_flight_ = true;
  updates_->start(units_.size(), [this, options, coef](std::size_t i) {
    auto& u = units_[i];
    update_on_host(u, options, coef, u.spare_grad, u.spare_weights);
  });
}

void zero_optimizer::settle_delayed() {
  if (!delayed_in_flight_) return;
  updates_->wait_all();
  torch::NoGradGuard no_grad;
  host_weights_changing();
  for (auto& u : units_) u.host_weights.copy_(u.spare_weights);
  delayed_in_flight_ = false;
}

torch::Tensor zero_optimizer::full_weights() {
  settle_all();
  std::vector<torch::Tensor> fulls;
  for (auto& u : units_) fulls.push_back(gather_full(u, torch::kFloat).to(torch::kCPU));
  synchronize();
  std::vector<torch::Tensor> pieces;
  for (const auto& [u, s] : order_) {
    const auto& sl = units_[u].slots[s];
    pieces.push_back(fulls[u].narrow(0, sl.offset, sl.numel));
  }
  return torch::cat(pieces);
}

std::vector<zero_optimizer::parameter_place> zero_optimizer::parameters_of(std::size_t u) const {
  std::vector<parameter_place> out;
  for (const auto& s : units_.at(u).slots) out.push_back({s.name, s.shape, s.offset, s.numel});
  return out;
}

std::pair<std::int64_t, std::int64_t> zero_optimizer::kept_range(std::size_t u) const {
  const auto& un = units_.at(u);
  const std::int64_t begin = std::min(un.numel, part() * un.shard);
  return {begin, std::min(un.shard, un.numel - begin)};
}

void zero_optimizer::refresh_weights() {
  torch::NoGradGuard no_grad;
  settle_all();
  if (options_.offload_param) {
    host_weights_changing();
    for (auto& u : units_) {
      u.host_weights.copy_(u.master);
      if (u.spare_weights.defined()) u.spare_weights.copy_(u.master);
    }
  }
  if (options_.stage == 3) {
    release_all();
    return;
  }
  for (auto& u : units_) fill_full(u, device_shard(u, options_.compute_dtype));
  synchronize();
}

void zero_optimizer::release_all() {
  if (options_.stage != 3) return;
  for (std::size_t u = 0; u < units_.size(); ++u)
    if (units_[u].gathered) release(u);
}

}  // namespace cohort::core::train

// The NCCL backend of process_group for CUDA tensors (see nccl_process_group.hpp).
#include "core/comm/nccl_process_group.hpp"

#include "core/comm/abort_link.hpp"
#include "core/comm/collective_checks.hpp"
#include "core/comm/comm_error.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace cohort::core::comm {
namespace {

using clock = std::chrono::steady_clock;

std::string nccl_message(ncclResult_t r, ncclComm_t comm) {
  std::string m = ncclGetErrorString(r);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') m += std::string(" (") + last + ")";
  }
  return m;
}

comm_errc code_for(ncclResult_t r) {
  if (r == ncclInProgress) return comm_errc::timeout;
  if (r == ncclRemoteError || r == ncclSystemError) return comm_errc::peer_failure;
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) return comm_errc::invalid_argument;
  return comm_errc::backend_failure;
}

ncclDataType_t nccl_dtype(at::ScalarType s, const std::string& where) {
  switch (s) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    default: break;
  }
  throw comm_error(comm_errc::invalid_argument,
                   where + ": NCCL cannot reduce dtype " + c10::toString(s) +
                       " (allowed: float32, float64, float16, bfloat16, int32, int64)");
}

ncclRedOp_t nccl_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::avg: return ncclAvg;
    case reduce_op::max: return ncclMax;
    case reduce_op::min: return ncclMin;
  }
  return ncclSum;
}

// One enqueued NCCL collective: done when the event recorded after it on the group's stream
// has been reached (or when the group fails it first).
class nccl_work final : public work {
 public:
  nccl_work(std::string what, c10::DeviceIndex device, std::vector<at::Tensor> keep)
      : work(std::move(what)), device_(device), keep_(std::move(keep)) {}

  void record_end(const c10::cuda::CUDAStream& stream, clock::time_point deadline) {
    end_.record(stream);
    deadline_ = deadline;
    recorded_ = true;
  }
  bool end_reached() { return recorded_ && end_.query(); }
  clock::time_point deadline() const { return deadline_; }
  // Once the operation is over its tensors may go (the caching allocator already knows the
  // group's stream used them): a work kept by the caller must not pin its buffers. Called by
  // the group with its mutex held.
  void drop_tensors() { keep_.clear(); }

  void wait_stream(std::chrono::milliseconds) override {
    if (auto e = exception()) std::rethrow_exception(e);
    if (!recorded_) return;
    c10::cuda::CUDAGuard guard(device_);
    end_.block(c10::cuda::getCurrentCUDAStream(device_));
  }

 protected:
  void poll() override {
    if (end_reached()) finish();
  }
  std::chrono::microseconds poll_interval() const override { return std::chrono::microseconds(50); }

 private:
  at::cuda::CUDAEvent end_;
  const c10::DeviceIndex device_;
  std::vector<at::Tensor> keep_;  // the operation's tensors live until it is done
  clock::time_point deadline_{};
  bool recorded_ = false;  // set before the work is published, constant afterwards
};

}  // namespace

struct nccl_process_group::impl {
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{};
  c10::DeviceIndex device = 0;
  std::string here;
  std::optional<c10::cuda::CUDAStream> stream;

  mutable std::mutex mutex;  // guards everything below and serialises every NCCL call
  ncclComm_t comm = nullptr;
  std::deque<std::shared_ptr<nccl_work>> in_flight;  // in stream order
  std::atomic<bool> aborted{false};
  std::string abort_reason;
  std::condition_variable watchdog_cv;
  bool stopping = false;
  std::thread watchdog;

  // A call answered ncclInProgress has not settled yet: poll the communicator's state until it
  // has, or until deadline (then ncclInProgress is returned). The communicator is blocking, so
  // NCCL answers so only where a call hands work to its own threads; the first 200 µs spin
  // (yielding), as a timed sleep costs 50 µs or more of timer slack on Linux; longer waits sleep.
  ncclResult_t settle(ncclResult_t r, clock::time_point deadline) {
    const auto spin_until = clock::now() + std::chrono::microseconds(200);
    while (r == ncclInProgress) {
      const auto now = clock::now();
      if (now >= deadline) return ncclInProgress;
      if (now < spin_until)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
      r = q != ncclSuccess ? q : state;
    }
    return r;
  }

  void abort_locked(const std::string& reason, comm_errc code) {
    if (aborted) return;
    aborted = true;
    abort_reason = reason;
    // Fail the works first, so that kernels torn down by the abort never read as success.
    for (auto& w : in_flight)
      w->finish(std::make_exception_ptr(comm_error(code, w->what() + ": " + reason)));
    // The tensors stay with the works: an aborted kernel may still touch them.
    in_flight.clear();
    if (comm != nullptr) {
      const ncclResult_t r = ncclCommAbort(comm);
      if (r != ncclSuccess && r != ncclInProgress)
        abort_reason += " (ncclCommAbort reported: " + std::string(ncclGetErrorString(r)) + ")";
      comm = nullptr;
    }
    watchdog_cv.notify_all();
  }

  void watchdog_loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      if (in_flight.empty())
        watchdog_cv.wait(lock, [&] { return stopping || !in_flight.empty(); });
      else
        watchdog_cv.wait_for(lock, std::chrono::milliseconds(2));
      if (stopping) break;
      while (!in_flight.empty() && in_flight.front()->end_reached()) {
        in_flight.front()->finish();
        in_flight.front()->drop_tensors();
        in_flight.pop_front();
      }
      if (in_flight.empty() || aborted) continue;
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
      const ncclResult_t r = q != ncclSuccess ? q : state;
      if (r != ncclSuccess && r != ncclInProgress) {
        abort_locked("NCCL reported an asynchronous error: " + nccl_message(r, comm) +
                         " (a peer probably died); the communicator was aborted",
                     code_for(r) == comm_errc::backend_failure ? comm_errc::peer_failure : code_for(r));
      } else if (clock::now() >= in_flight.front()->deadline()) {
        abort_locked(in_flight.front()->what() + " did not complete within " +
                         std::to_string(timeout.count()) + " ms; the communicator was aborted",
                     comm_errc::timeout);
      }
    }
  }

  std::shared_ptr<work> launch(const std::shared_ptr<abort_link>& link, const char* op,
                               std::vector<at::Tensor> tensors,
                               const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& call) {
    auto w = std::make_shared<nccl_work>(here + " " + op, device, tensors);
    std::weak_ptr<abort_link> weak = link;
    w->set_on_timeout([weak](const std::string& why) {
      if (auto l = weak.lock()) l->abort(why);
    });
    std::lock_guard<std::mutex> lock(mutex);
    if (aborted) {
      w->finish(std::make_exception_ptr(
          comm_error(comm_errc::aborted, w->what() + ": group was aborted: " + abort_reason)));
      return w;
    }
    c10::cuda::CUDAGuard guard(device);
    // The collective must see everything the caller queued on its stream before it.
    at::cuda::CUDAEvent ready;
    ready.record(c10::cuda::getCurrentCUDAStream(device));
    ready.block(*stream);
    const auto deadline = clock::now() + timeout;
    const ncclResult_t r = settle(call(comm, stream->stream()), deadline);
    if (r != ncclSuccess) {
      const std::string msg = std::string(op) + " could not be enqueued: " + nccl_message(r, comm);
      w->finish(std::make_exception_ptr(comm_error(code_for(r), w->what() + ": " + msg)));
      abort_locked(msg, code_for(r));
      return w;
    }
    // The caching allocator must not hand these blocks to the compute stream while the
    // collective may still use them.
    for (const auto& t : tensors)
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), *stream);
    w->record_end(*stream, deadline);
    in_flight.push_back(w);
    watchdog_cv.notify_all();
    return w;
  }
};

nccl_process_group::nccl_process_group(const group_options& options)
    : impl_(std::make_unique<impl>()), link_(std::make_shared<abort_link>(this)) {
  auto& m = *impl_;
  m.rank = options.rank;
  m.size = options.world_size;
  m.timeout = options.timeout;
  const int count = c10::cuda::device_count();
  const int device = options.cuda_device >= 0 ? options.cuda_device : c10::cuda::current_device();
  if (device >= count)
    throw comm_error(comm_errc::invalid_argument,
                     "nccl rank " + std::to_string(m.rank) + ": cuda device " +
                         std::to_string(device) + " does not exist (this process sees " +
                         std::to_string(count) + ")");
  m.device = static_cast<c10::DeviceIndex>(device);
  m.here = "nccl rank " + std::to_string(m.rank) + "/" + std::to_string(m.size) + " (cuda:" +
           std::to_string(device) + ")";
  c10::cuda::CUDAGuard guard(m.device);

  prefix_store keys(options.rendezvous, options.key_prefix + "nccl/");
  ncclUniqueId id;
  if (m.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      throw comm_error(comm_errc::backend_failure,
                       m.here + ": ncclGetUniqueId failed: " + nccl_message(r, nullptr));
    keys.set("unique_id", std::string(id.internal, sizeof(id.internal)));
  } else {
    std::string bytes;
    try {
      bytes = keys.get("unique_id", m.timeout);
    } catch (const comm_error& e) {
      throw comm_error(e.code(), m.here + " rendezvous (key prefix '" + options.key_prefix +
                                     "'): rank 0 did not publish the NCCL id: " + e.what());
    }
    if (bytes.size() != sizeof(id.internal))
      throw comm_error(comm_errc::store_failure,
                       m.here + ": the NCCL id in the store has " + std::to_string(bytes.size()) +
                           " bytes, expected " + std::to_string(sizeof(id.internal)));
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  // A blocking initialisation cannot be interrupted, so it starts only once every rank has
  // shown up in the store within the timeout; a rank that never comes fails the others here.
  keys.set("arrived/" + std::to_string(m.rank), "1");
  std::vector<std::string> arrivals;
  for (int r = 0; r < m.size; ++r) arrivals.push_back("arrived/" + std::to_string(r));
  try {
    keys.wait(arrivals, m.timeout);
  } catch (const comm_error& e) {
    throw comm_error(e.code(), m.here + " rendezvous (key prefix '" + options.key_prefix +
                                   "'): not every rank arrived within " +
                                   std::to_string(m.timeout.count()) + " ms: " + e.what());
  }
  // Blocking, as torch.distributed's: each collective is enqueued by the calling thread. A
  // non-blocking communicator hands every call to a thread of NCCL's own, which cost 100–150 µs
  // per collective and made those below 32 MiB 2–5x slower. ncclCommAbort from the watchdog
  // still ends a collective whose kernel waits on a dead peer.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  ncclResult_t r = ncclCommInitRankConfig(&m.comm, m.size, id, m.rank, &config);
  r = m.settle(r, clock::now() + m.timeout);
  if (r != ncclSuccess) {
    const std::string msg = r == ncclInProgress
                                ? "not every rank joined the NCCL communicator within " +
                                      std::to_string(m.timeout.count()) + " ms"
                                : "ncclCommInitRankConfig failed: " + nccl_message(r, m.comm);
    if (m.comm != nullptr) ncclCommAbort(m.comm);
    m.comm = nullptr;
    throw comm_error(code_for(r), m.here + " rendezvous: " + msg);
  }
  m.stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, m.device);
  m.watchdog = std::thread([this] { impl_->watchdog_loop(); });
}

nccl_process_group::~nccl_process_group() {
  link_->detach();
  auto& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    m.stopping = true;
  }
  m.watchdog_cv.notify_all();
  m.watchdog.join();
  std::unique_lock<std::mutex> lock(m.mutex);
  // Let what is queued finish (bounded by the timeout), then close cleanly; abort otherwise.
  const auto deadline = clock::now() + m.timeout;
  while (!m.aborted && !m.in_flight.empty() && clock::now() < deadline) {
    if (m.in_flight.front()->end_reached()) {
      m.in_flight.front()->finish();
      m.in_flight.front()->drop_tensors();
      m.in_flight.pop_front();
    } else {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      lock.lock();
    }
  }
  if (m.aborted || m.comm == nullptr) return;
  if (!m.in_flight.empty()) {
    m.abort_locked("process group destroyed with operations still running", comm_errc::aborted);
    return;
  }
  c10::cuda::CUDAGuard guard(m.device);
  if (m.settle(ncclCommFinalize(m.comm), clock::now() + m.timeout) == ncclSuccess) {
    ncclCommDestroy(m.comm);  // local frees only once finalized; nothing left to report to
    m.comm = nullptr;
  } else {
    m.abort_locked("process group destroyed: ncclCommFinalize did not settle", comm_errc::aborted);
  }
}

int nccl_process_group::rank() const { return impl_->rank; }
int nccl_process_group::size() const { return impl_->size; }
std::chrono::milliseconds nccl_process_group::timeout() const { return impl_->timeout; }
bool nccl_process_group::is_aborted() const { return impl_->aborted; }

void nccl_process_group::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->abort_locked(reason, comm_errc::aborted);
}

namespace {
void check_device(const at::Tensor& t, c10::DeviceIndex device, const std::string& where, const char* name) {
  check_tensor(t, where, name, at::kCUDA);
  if (t.device().index() != device)
    throw comm_error(comm_errc::invalid_argument,
                     where + ": " + name + " is on " + t.device().str() + " but the group uses cuda:" +
                         std::to_string(device));
}
}  // namespace

std::shared_ptr<work> nccl_process_group::all_reduce(at::Tensor tensor, reduce_op op) {
  const std::string w = impl_->here + " all_reduce";
  check_device(tensor, impl_->device, w, "tensor");
  check_reduce(tensor, op, w);
  const auto dtype = nccl_dtype(tensor.scalar_type(), w);
  return impl_->launch(link_, "all_reduce", {tensor}, [=](ncclComm_t comm, cudaStream_t s) {
    return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()),
                         dtype, nccl_op(op), comm, s);
  });
}

std::shared_ptr<work> nccl_process_group::reduce_scatter(at::Tensor input, at::Tensor output, reduce_op op) {
  const std::string w = impl_->here + " reduce_scatter";
  check_device(input, impl_->device, w, "input");
  check_device(output, impl_->device, w, "output");
  check_reduce(input, op, w);
  check_reduce_scatter(input, output, impl_->size, w);
  const auto dtype = nccl_dtype(input.scalar_type(), w);
  return impl_->launch(link_, "reduce_scatter", {input, output}, [=](ncclComm_t comm, cudaStream_t s) {
    return ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<std::size_t>(output.numel()),
                             dtype, nccl_op(op), comm, s);
  });
}

std::shared_ptr<work> nccl_process_group::all_gather(at::Tensor input, at::Tensor output) {
  const std::string w = impl_->here + " all_gather";
  check_device(input, impl_->device, w, "input");
  check_device(output, impl_->device, w, "output");
  check_all_gather(input, output, impl_->size, w);
  return impl_->launch(link_, "all_gather", {input, output}, [=](ncclComm_t comm, cudaStream_t s) {
    return ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<std::size_t>(input.nbytes()),
                         ncclUint8, comm, s);
  });
}

std::shared_ptr<work> nccl_process_group::broadcast(at::Tensor tensor, int root) {
  const std::string w = impl_->here + " broadcast";
  check_device(tensor, impl_->device, w, "tensor");
  check_root(root, impl_->size, w);
  return impl_->launch(link_, "broadcast", {tensor}, [=](ncclComm_t comm, cudaStream_t s) {
    return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<std::size_t>(tensor.nbytes()),
                         ncclUint8, root, comm, s);
  });
}

std::shared_ptr<work> nccl_process_group::barrier() {
  c10::cuda::CUDAGuard guard(impl_->device);
  at::Tensor token = at::zeros({1}, at::TensorOptions().device(at::kCUDA, impl_->device).dtype(at::kFloat));
  return impl_->launch(link_, "barrier", {token}, [=](ncclComm_t comm, cudaStream_t s) {
    return ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum, comm, s);
  });
}

}  // namespace cohort::core::comm

// The Gloo backend of process_group for CPU tensors (see gloo_process_group.hpp).
#include "core/comm/gloo_process_group.hpp"

#include "core/comm/abort_link.hpp"
#include "core/comm/collective_checks.hpp"
#include "core/comm/comm_error.hpp"
#include "core/comm/gloo_ring.hpp"
#include "core/comm/gloo_store_adapter.hpp"
#include "core/comm/store_auth.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <ATen/ATen.h>

namespace cohort::core::comm {
namespace {

using reduce_fn = void (*)(void*, const void*, const void*, std::size_t);

template <typename T>
reduce_fn gloo_reduce_fn(reduce_op op) {
  switch (op) {
    case reduce_op::max: return static_cast<reduce_fn>(&gloo::max<T>);
    case reduce_op::min: return static_cast<reduce_fn>(&gloo::min<T>);
    case reduce_op::sum:
    case reduce_op::avg: break;
  }
  return static_cast<reduce_fn>(&gloo::sum<T>);
}

// Gloo reduces float32/64 and int32/64 natively; 16-bit floats travel as float32.
at::ScalarType compute_dtype(at::ScalarType s) {
  return (s == at::kBFloat16 || s == at::kHalf) ? at::kFloat : s;
}

template <typename T>
void run_allreduce(const std::shared_ptr<gloo::Context>& ctx, at::Tensor& buf, reduce_op op,
                   std::uint32_t tag, std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(buf.data_ptr<T>(), static_cast<std::size_t>(buf.numel()));
  opts.setReduceFunction(gloo_reduce_fn<T>(op));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

template <typename T>
void run_reduce_scatter(const std::shared_ptr<gloo::Context>& ctx, at::Tensor& acc, std::size_t chunk,
                        reduce_op op, std::uint32_t tag, std::chrono::milliseconds timeout) {
  ring_reduce_scatter<T>(*ctx, acc.data_ptr<T>(), chunk, gloo_reduce_fn<T>(op), tag, timeout);
}

// Turns whatever a Gloo call threw into a comm_error that says where it happened.
comm_error classify(const std::string& where, std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const comm_error& ce) {
    return comm_error(ce.code(), where + ": " + ce.what());
  } catch (const std::exception& ex) {
    const std::string msg = ex.what();
    const bool timed_out = msg.find("imed out") != std::string::npos ||
                           msg.find("imeout") != std::string::npos;
    return comm_error(timed_out ? comm_errc::timeout : comm_errc::peer_failure,
                      where + ": " + msg +
                          (timed_out ? "" : " (a peer probably died or aborted its group)"));
  } catch (...) {
    return comm_error(comm_errc::backend_failure, where + ": unknown exception from Gloo");
  }
}

// Sends out[p] to every peer p and receives in[p] (of out[p]'s size) from each, on `slot`.
void exchange_with_peers(gloo::Context& ctx, std::uint64_t slot, std::vector<std::string>& out,
                         std::vector<std::string>& in, std::chrono::milliseconds timeout) {
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends, receives;
  for (int p = 0; p < ctx.size; ++p) {
    if (p == ctx.rank) continue;
    in[p].assign(out[p].size(), '\0');
    receives.push_back(ctx.createUnboundBuffer(in[p].data(), in[p].size()));
    receives.back()->recv(p, slot);
    sends.push_back(ctx.createUnboundBuffer(out[p].data(), out[p].size()));
    sends.back()->send(p, slot);
  }
  for (auto& r : receives)
    if (!r->waitRecv(timeout)) throw std::runtime_error("pair proof: a receive was aborted");
  for (auto& s : sends)
    if (!s->waitSend(timeout)) throw std::runtime_error("pair proof: a send was aborted");
}

// Every pair's two ends prove to each other that they hold `secret` (group_options::peer_secret):
// a fresh challenge to each peer, then each answers the challenge it got. Throws comm_error
// (peer_failure) naming the first peer whose answer is wrong.
void prove_pairs(gloo::Context& ctx, const std::string& secret, const std::string& group,
                 std::chrono::milliseconds timeout, const std::string& here) {
  if (ctx.size == 1) return;
  // Slots of the form 0x31 <prefix byte> | round keep clear of Gloo's and of the ring's (0x30).
  const std::uint64_t base = std::uint64_t{0x31} << 56;
  const auto n = static_cast<std::size_t>(ctx.size);
  std::vector<std::string> challenges(n), asked(n), answers(n), proofs(n);
  try {
    for (int p = 0; p < ctx.size; ++p)
      if (p != ctx.rank) challenges[p] = make_pair_challenge();
    exchange_with_peers(ctx, base | 0, challenges, asked, timeout);
    for (int p = 0; p < ctx.size; ++p)
      if (p != ctx.rank) answers[p] = pair_proof(secret, group, ctx.rank, p, asked[p]);
    exchange_with_peers(ctx, base | 1, answers, proofs, timeout);
  } catch (...) {
    throw classify(here + " pair proof", std::current_exception());
  }
  for (int p = 0; p < ctx.size; ++p) {
    if (p == ctx.rank || check_pair_proof(secret, group, p, ctx.rank, challenges[p], proofs[p])) continue;
    throw comm_error(comm_errc::peer_failure,
                     here + ": the process connected as rank " + std::to_string(p) +
                         " did not prove that it belongs to this group (key prefix '" + group +
                         "'): it does not hold the attempt's secret; no tensor went to it");
  }
}

}  // namespace

gloo_process_group::gloo_process_group(const group_options& options)
    : rank_(options.rank), size_(options.world_size), timeout_(options.timeout),
      link_(std::make_shared<abort_link>(this)) {
  const std::string here = "gloo rank " + std::to_string(rank_) + "/" + std::to_string(size_);
  gloo::transport::tcp::attr attr;
  if (!options.gloo_interface.empty())
    attr.iface = options.gloo_interface;
  else
    attr.hostname = options.gloo_hostname;
  try {
    device_ = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw comm_error(comm_errc::invalid_argument,
                     here + ": cannot create a TCP device on " +
                         (attr.iface.empty() ? "host '" + attr.hostname + "'"
                                             : "interface '" + attr.iface + "'") +
                         ": " + e.what());
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
  context->setTimeout(timeout_);
  gloo_store_adapter adapter(
      std::make_shared<prefix_store>(options.rendezvous, options.key_prefix + "gloo/"), timeout_);
  try {
    context->connectFullMesh(adapter, device_);
  } catch (...) {
    const comm_error e = classify(here + " rendezvous (key prefix '" + options.key_prefix + "')",
                                  std::current_exception());
    throw comm_error(e.code(), std::string(e.what()) +
                                   "; check that all ranks started with the same store, prefix "
                                   "and world size");
  }
  if (!options.peer_secret.empty())
    prove_pairs(*context, options.peer_secret, options.key_prefix, timeout_, here);
  context_ = std::move(context);
  worker_ = std::thread([this] { worker_loop(); });
}

gloo_process_group::~gloo_process_group() {
  link_->detach();
  // Not aborted: the worker drains the queue and the connections close gracefully (buffered
  // bytes still reach the peers). Aborted: the queue is already failed and the sockets reset.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  worker_.join();
}

std::string gloo_process_group::where(const char* op) const {
  return "gloo rank " + std::to_string(rank_) + "/" + std::to_string(size_) + " " + op;
}

std::shared_ptr<work> gloo_process_group::enqueue(const char* op,
                                                  std::function<void(std::uint32_t)> run) {
  auto handle = std::make_shared<work>(where(op));
  std::weak_ptr<abort_link> link = link_;
  handle->set_on_timeout([link](const std::string& why) {
    if (auto l = link.lock()) l->abort(why);
  });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_) {
      queue_.push_back({handle, std::move(run)});
      queue_cv_.notify_one();
      return handle;
    }
  }
  handle->finish(std::make_exception_ptr(
      comm_error(comm_errc::aborted, where(op) + ": group was aborted: " + abort_reason_)));
  return handle;
}

void gloo_process_group::worker_loop() {
  std::uint32_t tag = 0;
  for (;;) {
    task t;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      t = std::move(queue_.front());
      queue_.pop_front();
      running_ = t.handle;
    }
    try {
      t.run(tag++);
      t.handle->finish();
    } catch (...) {
      if (aborted_) {
        std::string reason;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          reason = abort_reason_;
        }
        t.handle->finish(std::make_exception_ptr(
            comm_error(comm_errc::aborted, t.handle->what() + ": group was aborted: " + reason)));
      } else {
        const comm_error e = classify(t.handle->what(), std::current_exception());
        t.handle->finish(std::make_exception_ptr(e));
        abort(e.what());  // the mesh is in an unknown state: fail everything after it
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    running_.reset();
  }
}

void gloo_process_group::abort(const std::string& reason) {
  std::deque<task> pending;
  std::shared_ptr<work> running;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = reason;
    pending.swap(queue_);
    running = running_;
  }
  if (running) pending.push_front({running, nullptr});
  for (auto& t : pending)
    t.handle->finish(std::make_exception_ptr(
        comm_error(comm_errc::aborted, t.handle->what() + ": group was aborted: " + reason)));
  // Resets every connection: peers blocked in an operation with this rank fail at once instead
  // of waiting out their timeout. (This rank's running Gloo call, already failed above, returns
  // by itself within the timeout: Gloo cannot interrupt a local wait.)
  context_->closeConnections();
}

std::shared_ptr<work> gloo_process_group::all_reduce(at::Tensor tensor, reduce_op op) {
  const auto w = where("all_reduce");
  check_tensor(tensor, w, "tensor", at::kCPU);
  check_reduce(tensor, op, w);
  return enqueue("all_reduce", [this, tensor, op](std::uint32_t tag) mutable {
    if (tensor.numel() == 0) return;
    const auto dtype = compute_dtype(tensor.scalar_type());
    at::Tensor buf = dtype == tensor.scalar_type() ? tensor : tensor.to(dtype);
    switch (dtype) {
      case at::kFloat: run_allreduce<float>(context_, buf, op, tag, timeout_); break;
      case at::kDouble: run_allreduce<double>(context_, buf, op, tag, timeout_); break;
      case at::kInt: run_allreduce<std::int32_t>(context_, buf, op, tag, timeout_); break;
      default: run_allreduce<std::int64_t>(context_, buf, op, tag, timeout_); break;
    }
    if (op == reduce_op::avg) buf.div_(size_);
    if (!buf.is_same(tensor)) tensor.copy_(buf);
  });
}

std::shared_ptr<work> gloo_process_group::reduce_scatter(at::Tensor input, at::Tensor output,
                                                         reduce_op op) {
  const auto w = where("reduce_scatter");
  check_tensor(input, w, "input", at::kCPU);
  check_tensor(output, w, "output", at::kCPU);
  check_reduce(input, op, w);
  check_reduce_scatter(input, output, size_, w);
  return enqueue("reduce_scatter", [this, input, output, op](std::uint32_t tag) mutable {
    const auto chunk = static_cast<std::size_t>(output.numel());
    if (chunk == 0) return;
    // A private copy in the compute dtype: the ring reduces into it and leaves input intact.
    at::Tensor acc = input.reshape(-1).to(compute_dtype(input.scalar_type()), false, /*copy=*/true);
    switch (acc.scalar_type()) {
      case at::kFloat: run_reduce_scatter<float>(context_, acc, chunk, op, tag, timeout_); break;
      case at::kDouble: run_reduce_scatter<double>(context_, acc, chunk, op, tag, timeout_); break;
      case at::kInt: run_reduce_scatter<std::int32_t>(context_, acc, chunk, op, tag, timeout_); break;
      default: run_reduce_scatter<std::int64_t>(context_, acc, chunk, op, tag, timeout_); break;
    }
    at::Tensor mine = acc.narrow(0, static_cast<std::int64_t>(rank_ * chunk), static_cast<std::int64_t>(chunk));
    if (op == reduce_op::avg) mine.div_(size_);
    output.view(-1).copy_(mine);
  });
}

std::shared_ptr<work> gloo_process_group::all_gather(at::Tensor input, at::Tensor output) {
  const auto w = where("all_gather");
  check_tensor(input, w, "input", at::kCPU);
  check_tensor(output, w, "output", at::kCPU);
  check_all_gather(input, output, size_, w);
  return enqueue("all_gather", [this, input, output](std::uint32_t tag) mutable {
    const auto bytes = static_cast<std::size_t>(input.nbytes());
    if (bytes == 0) return;
    gloo::AllgatherOptions opts(context_);
    opts.setInput(static_cast<std::uint8_t*>(input.data_ptr()), bytes);
    opts.setOutput(static_cast<std::uint8_t*>(output.data_ptr()), bytes * size_);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

std::shared_ptr<work> gloo_process_group::broadcast(at::Tensor tensor, int root) {
  const auto w = where("broadcast");
  check_tensor(tensor, w, "tensor", at::kCPU);
  check_root(root, size_, w);
  return enqueue("broadcast", [this, tensor, root](std::uint32_t tag) mutable {
    const auto bytes = static_cast<std::size_t>(tensor.nbytes());
    if (bytes == 0) return;
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<std::uint8_t*>(tensor.data_ptr()), bytes);
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

std::shared_ptr<work> gloo_process_group::barrier() {
  return enqueue("barrier", [this](std::uint32_t tag) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

void gloo_process_group::exchange(const void* out, std::size_t out_bytes, int to, void* in,
                                  std::size_t in_bytes, int from, std::uint64_t slot) {
  const auto w = where("exchange");
  if (aborted_) throw comm_error(comm_errc::aborted, w + ": group was aborted");
  try {
    std::unique_ptr<gloo::transport::UnboundBuffer> receive, send;
    if (from >= 0 && in_bytes > 0) {
      receive = context_->createUnboundBuffer(in, in_bytes);
      receive->recv(from, slot);
    }
    if (to >= 0 && out_bytes > 0) {
      send = context_->createUnboundBuffer(const_cast<void*>(out), out_bytes);
      send->send(to, slot);
    }
    if (receive && !receive->waitRecv(timeout_))
      throw comm_error(comm_errc::aborted,
                       w + ": the receive from rank " + std::to_string(from) + " was aborted");
    if (send && !send->waitSend(timeout_))
      throw comm_error(comm_errc::aborted, w + ": the send to rank " + std::to_string(to) + " was aborted");
  } catch (const comm_error&) {
    throw;
  } catch (...) {
    throw classify(w + " with rank " + std::to_string(to >= 0 ? to : from), std::current_exception());
  }
}

}  // namespace cohort::core::comm

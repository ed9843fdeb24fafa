// The Gloo backend of process_group for CPU tensors: a full TCP mesh bootstrapped through the
// store, and one owned worker thread that runs the queued operations in order. abort() fails
// the queued and running works at once and resets every connection, so peers' operations fail
// too. The destructor lets queued operations finish (each bounded by the timeout) and closes
// gracefully; call abort() first to tear down at once (a stuck local Gloo call still returns only
// at its timeout, and the destructor joins it).
#pragma once

#include "core/comm/process_group.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace cohort::core::comm {

class abort_link;

class gloo_process_group final : public process_group {
 public:
  explicit gloo_process_group(const group_options& options);
  ~gloo_process_group() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  backend_kind backend() const override { return backend_kind::gloo; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  std::shared_ptr<work> all_reduce(at::Tensor tensor, reduce_op op) override;
  std::shared_ptr<work> reduce_scatter(at::Tensor input, at::Tensor output, reduce_op op) override;
  std::shared_ptr<work> all_gather(at::Tensor input, at::Tensor output) override;
  std::shared_ptr<work> broadcast(at::Tensor tensor, int root) override;
  std::shared_ptr<work> barrier() override;
  void abort(const std::string& reason) override;
  bool is_aborted() const override { return aborted_; }

  // Point to point, on the caller's thread and outside the queue, for a group that runs nothing
  // else meanwhile (the peer replicas' own group): posts the receive of `in_bytes` from rank
  // `from` into `in` and the send of `out_bytes` of `out` to rank `to`, both on `slot` (the two
  // ends name the same slot), then waits for both. -1 for `to` or `from` skips that side. Throws
  // comm_error naming the peer when either does not complete within the timeout.
  void exchange(const void* out, std::size_t out_bytes, int to, void* in, std::size_t in_bytes, int from,
                std::uint64_t slot);

 private:
  struct task {
    std::shared_ptr<work> handle;
    std::function<void(std::uint32_t tag)> run;  // runs on the worker thread
  };
  std::string where(const char* op) const;
  std::shared_ptr<work> enqueue(const char* op, std::function<void(std::uint32_t)> run);
  void worker_loop();

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<abort_link> link_;

  std::mutex mutex_;  // guards queue_, running_, stopping_, abort_reason_
  std::condition_variable queue_cv_;
  std::deque<task> queue_;
  std::shared_ptr<work> running_;
  bool stopping_ = false;
  std::string abort_reason_;
  std::atomic<bool> aborted_{false};
  std::thread worker_;  // last: starts once everything above exists
};

}  // namespace cohort::core::comm

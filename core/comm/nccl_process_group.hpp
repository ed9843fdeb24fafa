// The NCCL backend of process_group for CUDA tensors (built only with COHORT_CUDA). Rank 0's
// unique id travels through the store, and the (blocking) communicator is created once every
// rank has arrived in the store within the timeout. Collectives run on the group's own stream,
// ordered after the caller's current stream by an event; a watchdog thread completes works, and
// aborts the communicator (ncclCommAbort) on an asynchronous NCCL error or when an operation
// outlives the timeout.
#pragma once

#include "core/comm/process_group.hpp"

#include <memory>

namespace cohort::core::comm {

class abort_link;

class nccl_process_group final : public process_group {
 public:
  explicit nccl_process_group(const group_options& options);
  ~nccl_process_group() override;

  int rank() const override;
  int size() const override;
  backend_kind backend() const override { return backend_kind::nccl; }
  std::chrono::milliseconds timeout() const override;

  std::shared_ptr<work> all_reduce(at::Tensor tensor, reduce_op op) override;
  std::shared_ptr<work> reduce_scatter(at::Tensor input, at::Tensor output, reduce_op op) override;
  std::shared_ptr<work> all_gather(at::Tensor input, at::Tensor output) override;
  std::shared_ptr<work> broadcast(at::Tensor tensor, int root) override;
  std::shared_ptr<work> barrier() override;
  void abort(const std::string& reason) override;
  bool is_aborted() const override;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::shared_ptr<abort_link> link_;
};

}  // namespace cohort::core::comm

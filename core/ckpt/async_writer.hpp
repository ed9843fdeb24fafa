// Background writing of a rank's shard: the caller copies device state to host buffers, hands
// them over (moved) and continues training; the next submit (or wait) blocks until the previous
// write finished. Owned and used by one thread; the write runs on a thread of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/ckpt/writer.hpp"

namespace cohort::core::ckpt {

// A host copy of one tensor, owned by the writer while it writes.
struct owned_shard_tensor {
  std::string key;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
  std::vector<logical_slice> slices;
};

// Host copies of `tensors` (each copied from its data or read whole through its reader), for a
// write that goes on while the sources change.
std::vector<owned_shard_tensor> stage_tensors(const std::vector<shard_tensor>& tensors);

class async_rank_writer {
 public:
  async_rank_writer() = default;
  ~async_rank_writer();  // waits for a write in flight; its error is dropped
  async_rank_writer(const async_rank_writer&) = delete;
  async_rank_writer& operator=(const async_rank_writer&) = delete;

  // Waits for the previous write (rethrowing its error), then writes on a background thread.
  // on_written runs on that thread once the files are durable (e.g. to report to the committer).
  void submit(std::string dir, int rank, std::vector<owned_shard_tensor> tensors, rank_state state,
              std::function<void(const rank_report&)> on_written = {}, write_options options = {});
  // Blocks until the last submitted write finished; returns its report (nullopt if none was
  // pending) or rethrows its error.
  std::optional<rank_report> wait();
  // True while a submitted write has not finished.
  bool busy() const;

 private:
  std::thread thread_;
  std::future<rank_report> result_;
};

}  // namespace cohort::core::ckpt

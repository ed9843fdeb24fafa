// One background thread per write; a submit joins the previous one first.
#include "core/ckpt/async_writer.hpp"

#include <chrono>
#include <cstring>

namespace cohort::core::ckpt {

async_rank_writer::~async_rank_writer() {
  if (thread_.joinable()) thread_.join();
}

std::vector<owned_shard_tensor> stage_tensors(const std::vector<shard_tensor>& tensors) {
  std::vector<owned_shard_tensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) {
    owned_shard_tensor o{t.key, t.dtype, t.shape, std::vector<std::uint8_t>(t.nbytes), t.slices};
    if (t.nbytes > 0 && t.data != nullptr) {
      std::memcpy(o.bytes.data(), t.data, t.nbytes);
    } else if (t.nbytes > 0) {
      t.read(0, o.bytes.data(), t.nbytes);
    }
    out.push_back(std::move(o));
  }
  return out;
}

void async_rank_writer::submit(std::string dir, int rank, std::vector<owned_shard_tensor> tensors, rank_state state,
                               std::function<void(const rank_report&)> on_written, write_options options) {
  wait();
  std::packaged_task<rank_report()> task(
      [dir = std::move(dir), rank, tensors = std::move(tensors), state = std::move(state),
       on_written = std::move(on_written), options = std::move(options)]() {
        std::vector<shard_tensor> views;
        views.reserve(tensors.size());
        for (const auto& t : tensors) {
          views.push_back({t.key, t.dtype, t.shape, t.bytes.data(), t.bytes.size(), t.slices});
        }
        rank_report report = write_rank_shard(dir, rank, views, state, options);
        if (on_written) on_written(report);
        return report;
      });
  result_ = task.get_future();
  thread_ = std::thread(std::move(task));
}

std::optional<rank_report> async_rank_writer::wait() {
  if (thread_.joinable()) thread_.join();
  if (!result_.valid()) return std::nullopt;
  return result_.get();
}

bool async_rank_writer::busy() const {
  return result_.valid() && result_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
}

}  // namespace cohort::core::ckpt

// Reading a checkpoint for a different world size: any element range of any logical tensor is
// assembled from whichever old ranks' shard files hold it. Not thread-safe (it opens old rank
// files lazily); use one per thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/ckpt/manifest.hpp"

namespace cohort::core::model {
class safetensors_reader;
}

namespace cohort::core::ckpt {

struct flat_range {
  std::uint64_t offset = 0;  // elements
  std::uint64_t length = 0;
};

// ZeRO's even split: chunks of ceil(numel / world) elements; the last ranks may get fewer or none.
flat_range even_partition(std::uint64_t numel, int world_size, int rank);

class reshard_reader {
 public:
  reshard_reader(std::string ckpt_dir, manifest m);
  ~reshard_reader();

  const manifest& layout() const { return manifest_; }
  // Copies elements [offset, offset + length) of logical tensor `name` into dst
  // (length * dtype size bytes). Throws ckpt_error naming the tensor and file on any gap or error.
  void read(const std::string& name, std::uint64_t offset, std::uint64_t length, void* dst);
  // Every logical tensor's bytes for rank `rank` of `world_size` under even_partition.
  std::map<std::string, std::string> read_partition(int world_size, int rank);

 private:
  const model::safetensors_reader& open_rank(int rank);
  std::string dir_;
  manifest manifest_;
  std::map<int, std::unique_ptr<model::safetensors_reader>> readers_;
};

}  // namespace cohort::core::ckpt

// Names and durable file operations of the checkpoint layout:
//   <run>/checkpoints/step-<8 digits>/{rank-<5 digits>.safetensors, rank-<5 digits>.json,
//                                      manifest.json, COMMITTED}
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cohort::core::ckpt {

inline constexpr const char* committed_name = "COMMITTED";
inline constexpr const char* manifest_name = "manifest.json";

std::string checkpoints_dir(const std::string& run_dir);              // <run>/checkpoints
std::string step_dir_name(std::uint64_t step);                        // step-00000200
std::string step_dir(const std::string& run_dir, std::uint64_t step);  // <run>/checkpoints/step-...
// The step of a directory name "step-<digits>", or nullopt for any other name.
std::optional<std::uint64_t> parse_step_dir_name(const std::string& name);
std::string rank_shard_name(int rank);  // rank-00000.safetensors
std::string rank_state_name(int rank);  // rank-00000.json

// Writes bytes to PATH.tmp, fsyncs it, renames it to PATH and fsyncs the directory, so PATH is
// either absent or complete after a crash. Throws ckpt_error(io) naming the file.
void write_file_durable(const std::string& path, const std::string& bytes);
void fsync_path(const std::string& path);  // a file or a directory; throws ckpt_error(io)

struct file_digest {
  std::uint64_t size = 0;
  std::uint64_t xxh64 = 0;
};
// Streams the file through XXH64. Throws ckpt_error(missing_file / io) naming it.
file_digest digest_file(const std::string& path);
std::string read_small_file(const std::string& path);  // throws ckpt_error(missing_file / io)

}  // namespace cohort::core::ckpt

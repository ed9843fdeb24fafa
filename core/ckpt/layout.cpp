// Checkpoint names, fsync'd atomic writes and file digests.
#include "core/ckpt/layout.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/ckpt/ckpt_error.hpp"
#include "core/data/checksum.hpp"

namespace cohort::core::ckpt {
namespace {

[[noreturn]] void fail_io(const std::string& path, const std::string& what) {
  throw ckpt_error(ckpt_errc::io, path + ": " + what + ": " + std::strerror(errno));
}

std::string padded(std::uint64_t value, int width) {
  std::string s = std::to_string(value);
  if (static_cast<int>(s.size()) < width) s.insert(0, static_cast<std::size_t>(width) - s.size(), '0');
  return s;
}

// Reads PATH from start to end in chunks of `chunk` bytes, handing each to `consume`. Throws
// ckpt_error(missing_file / io) naming the file.
template <class Consume>
void read_chunks(const std::string& path, std::size_t chunk, Consume consume) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw ckpt_error(ckpt_errc::missing_file, path + ": file is missing");
    fail_io(path, "cannot open");
  }
  std::vector<char> buffer(chunk);
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      fail_io(path, "read failed");
    }
    if (n == 0) break;
    consume(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
}

}  // namespace

std::string checkpoints_dir(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "checkpoints").string();
}

std::string step_dir_name(std::uint64_t step) { return "step-" + padded(step, 8); }

std::string step_dir(const std::string& run_dir, std::uint64_t step) {
  return (std::filesystem::path(checkpoints_dir(run_dir)) / step_dir_name(step)).string();
}

std::optional<std::uint64_t> parse_step_dir_name(const std::string& name) {
  const std::string prefix = "step-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  if (name.size() - prefix.size() > 19) return std::nullopt;
  std::uint64_t step = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + static_cast<std::uint64_t>(name[i] - '0');
  }
  return step;
}

std::string rank_shard_name(int rank) { return "rank-" + padded(static_cast<std::uint64_t>(rank), 5) + ".safetensors"; }
std::string rank_state_name(int rank) { return "rank-" + padded(static_cast<std::uint64_t>(rank), 5) + ".json"; }

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_io(path, "cannot open to fsync");
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    fail_io(path, "fsync failed");
  }
  ::close(fd);
}

void write_file_durable(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_io(tmp, "cannot create");
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      fail_io(tmp, "write failed (disk full?)");
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    fail_io(tmp, "fsync failed");
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail_io(path, "cannot rename from " + tmp);
  fsync_path(std::filesystem::path(path).parent_path().string());
}

file_digest digest_file(const std::string& path) {
  data::xxh64_stream hash;
  file_digest d;
  read_chunks(path, 4 << 20, [&](const char* bytes, std::size_t n) {
    hash.update(bytes, n);
    d.size += n;
  });
  d.xxh64 = hash.digest();
  return d;
}

std::string read_small_file(const std::string& path) {
  std::string out;
  read_chunks(path, 65536, [&](const char* bytes, std::size_t n) { out.append(bytes, n); });
  return out;
}

}  // namespace cohort::core::ckpt

// Thin POSIX helpers shared by the store's files: an owning file descriptor, full writes and
// preads that retry on EINTR, and errno turned into store_error(io) naming the path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace cohort::core::store {

// Throws store_error(io): "<what> <path>: <strerror(errno)>".
[[noreturn]] void throw_errno(const std::string& what, const std::filesystem::path& path);

class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  ~unique_fd() { reset(); }
  unique_fd(unique_fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  unique_fd& operator=(unique_fd&& other) noexcept;
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();
  // close(2) with its error reported (NFS reports write errors at close).
  void close_checked(const std::filesystem::path& path);

 private:
  int fd_ = -1;
};

// Opens with O_CLOEXEC added; throws store_error(io) on failure.
unique_fd open_or_throw(const std::filesystem::path& path, int flags, unsigned mode = 0644);
void write_all(int fd, std::string_view data, const std::filesystem::path& path);
// Reads up to `size` bytes at `offset`; returns the bytes read (fewer only at end of file).
std::string pread_some(int fd, std::uint64_t offset, std::size_t size,
                       const std::filesystem::path& path);
std::uint64_t file_size(int fd, const std::filesystem::path& path);
void fsync_or_throw(int fd, const std::filesystem::path& path);

}  // namespace cohort::core::store

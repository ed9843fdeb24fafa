// POSIX helpers (see posix_io.hpp).
#include "core/store/posix_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/store/store_error.hpp"

namespace cohort::core::store {

void throw_errno(const std::string& what, const std::filesystem::path& path) {
  int err = errno;
  throw store_error(store_error_kind::io, path.string(),
                    what + " " + path.string() + ": " + std::strerror(err));
}

unique_fd& unique_fd::operator=(unique_fd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void unique_fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void unique_fd::close_checked(const std::filesystem::path& path) {
  int fd = fd_;
  fd_ = -1;
  if (fd >= 0 && ::close(fd) != 0 && errno != EINTR) throw_errno("cannot close", path);
}

unique_fd open_or_throw(const std::filesystem::path& path, int flags, unsigned mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, static_cast<mode_t>(mode));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno("cannot open", path);
  return unique_fd(fd);
}

void write_all(int fd, std::string_view data, const std::filesystem::path& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot write", path);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

std::string pread_some(int fd, std::uint64_t offset, std::size_t size,
                       const std::filesystem::path& path) {
  std::string out(size, '\0');
  std::size_t got = 0;
  while (got < size) {
    ssize_t n = ::pread(fd, out.data() + got, size - got, static_cast<off_t>(offset + got));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot read", path);
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

std::uint64_t file_size(int fd, const std::filesystem::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno("cannot stat", path);
  return static_cast<std::uint64_t>(st.st_size);
}

void fsync_or_throw(int fd, const std::filesystem::path& path) {
  if (::fsync(fd) != 0) throw_errno("cannot fsync", path);
}

}  // namespace cohort::core::store

// Weight files on local disk, read by pread.
#include "core/model/weight_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/model/model_error.hpp"

namespace cohort::core::model {
namespace {

std::string range_text(std::uint64_t offset, std::uint64_t length) {
  return "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + length) + ")";
}

class local_file final : public weight_file {
 public:
  explicit local_file(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw model_error(model_errc::io, path_ + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    const bool stated = ::fstat(fd_, &st) == 0;
    if (!stated || !S_ISREG(st.st_mode)) {
      const std::string why = stated ? "not a regular file" : std::strerror(errno);
      ::close(fd_);
      throw model_error(model_errc::io, path_ + ": cannot read: " + why);
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  ~local_file() override { ::close(fd_); }
  local_file(const local_file&) = delete;
  local_file& operator=(const local_file&) = delete;

  const std::string& name() const override { return path_; }
  std::uint64_t size() const override { return size_; }
  void read(std::uint64_t offset, std::uint64_t length, void* dst) const override {
    check_weight_range(*this, offset, length);
    auto* p = static_cast<char*>(dst);
    for (std::uint64_t at = offset, left = length; left > 0;) {
      const ssize_t got = ::pread(fd_, p, left, static_cast<off_t>(at));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw model_error(model_errc::io, path_ + ": cannot read " + range_text(offset, length) + ": " +
                                              (got < 0 ? std::strerror(errno)
                                                       : "the file ends early (truncated while open?)"));
      p += got;
      at += static_cast<std::uint64_t>(got);
      left -= static_cast<std::uint64_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

}  // namespace

void check_weight_range(const weight_file& file, std::uint64_t offset, std::uint64_t length) {
  if (offset > file.size() || length > file.size() - offset)
    throw model_error(model_errc::io, file.name() + ": " + range_text(offset, length) + " run past its " +
                                          std::to_string(file.size()) + " bytes");
}

std::unique_ptr<weight_file> open_local_weight_file(const std::string& path) {
  return std::make_unique<local_file>(path);
}

}  // namespace cohort::core::model

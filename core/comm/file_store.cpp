// A store on a directory (one machine, or a shared NFS / ReadWriteMany mount) (see file_store.hpp).
#include "core/comm/file_store.hpp"

#include "core/comm/comm_error.hpp"
#include "core/comm/memory_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace cohort::core::comm {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail_errno(const std::string& what) {
  throw comm_error(comm_errc::store_failure, "file_store: " + what + ": " + std::strerror(errno));
}

// Reads a whole file; false when it does not exist.
bool read_file(const fs::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buf;
  buf << in.rdbuf();
  out = buf.str();
  return true;
}

// Holds an exclusive flock on a file for its lifetime (works across threads and processes:
// each instance opens its own file description).
class file_lock {
 public:
  explicit file_lock(const fs::path& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail_errno("open lock file " + path.string());
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd_);
      errno = saved;
      fail_errno("flock " + path.string());
    }
  }
  ~file_lock() { ::close(fd_); }  // closing releases the lock
  file_lock(const file_lock&) = delete;
  file_lock& operator=(const file_lock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

file_store::file_store(std::filesystem::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_))
    throw comm_error(comm_errc::store_failure, "file_store: cannot create directory " +
                                                   dir_.string() + ": " + ec.message());
}

// Percent-encodes every byte outside [A-Za-z0-9_.-] so any key maps to one flat file name.
fs::path file_store::path_of(const std::string& key, const char* where) const {
  validate_store_key(key, where);
  static const char* hex = "0123456789ABCDEF";
  std::string name = "k_";
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += hex[c >> 4];
      name += hex[c & 15];
    }
  }
  if (name.size() > 250)
    throw comm_error(comm_errc::invalid_argument,
                     std::string(where) + ": key '" + key +
                         "' is too long for a file name once encoded (use keys under ~80 "
                         "bytes with file_store)");
  return dir_ / name;
}

void file_store::write_atomically(const fs::path& path, const std::string& value) {
  static std::atomic<std::uint64_t> counter{0};
  std::ostringstream tmp_name;
  tmp_name << ".tmp." << ::getpid() << "." << std::this_thread::get_id() << "." << counter++;
  const fs::path tmp = dir_ / tmp_name.str();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    out.flush();
    if (!out) fail_errno("write " + tmp.string());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail_errno("rename " + tmp.string() + " to " + path.string());
  }
}

void file_store::set(const std::string& key, const std::string& value) {
  const auto path = path_of(key, "file_store::set");
  validate_store_value(value, "file_store::set");
  write_atomically(path, value);
}

std::string file_store::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto path = path_of(key, "file_store::get");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  std::string value;
  while (!read_file(path, value)) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      throw comm_error(comm_errc::timeout, "file_store " + dir_.string() + ": key '" + key +
                                               "' was not set within " +
                                               std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return value;
}

std::int64_t file_store::add(const std::string& key, std::int64_t delta) {
  const auto path = path_of(key, "file_store::add");
  file_lock lock(dir_ / ".lock");
  std::string text;
  const std::int64_t result = (read_file(path, text) ? parse_counter(key, text) : 0) + delta;
  write_atomically(path, std::to_string(result));
  return result;
}

bool file_store::check(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    std::error_code ec;
    if (!fs::exists(path_of(key, "file_store::check"), ec)) return false;
  }
  return true;
}

bool file_store::remove(const std::string& key) {
  const auto path = path_of(key, "file_store::remove");
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  fail_errno("unlink " + path.string());
}

}  // namespace cohort::core::comm

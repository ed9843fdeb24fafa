// Crash-safe file primitives (see atomic_file.hpp).
#include "core/store/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/store/posix_io.hpp"
#include "core/store/store_error.hpp"

namespace cohort::core::store {

namespace {

std::uint64_t unique_token() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static std::atomic<std::uint64_t> counter{0};
  return rng() ^ (counter.fetch_add(1) << 48);
}

// Unlinks a temp file when the write that made it did not complete.
class temp_guard {
 public:
  explicit temp_guard(fs::path path) : path_(std::move(path)) {}
  ~temp_guard() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  void keep() { path_.clear(); }

 private:
  fs::path path_;
};

void write_synced(const fs::path& path, std::string_view content, unsigned mode) {
  auto fd = open_or_throw(path, O_WRONLY | O_CREAT | O_EXCL, mode);
  write_all(fd.get(), content, path);
  fsync_or_throw(fd.get(), path);
  fd.close_checked(path);
}

}  // namespace

fs::path temp_path_for(const fs::path& target) {
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%016llx", static_cast<long>(::getpid()),
                static_cast<unsigned long long>(unique_token()));
  return target.parent_path() / ("." + target.filename().string() + suffix);
}

void write_file_atomic(const fs::path& path, std::string_view content, unsigned mode) {
  auto temp = temp_path_for(path);
  temp_guard guard(temp);
  write_synced(temp, content, mode);
  if (::rename(temp.c_str(), path.c_str()) != 0) throw_errno("cannot rename temp file onto", path);
  guard.keep();
  fsync_dir(path.parent_path());
}

void write_json_atomic(const fs::path& path, const nlohmann::json& value, unsigned mode) {
  write_file_atomic(
      path, value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", mode);
}

std::optional<std::string> read_file(const fs::path& path) {
  int raw;
  do {
    raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw_errno("cannot open", path);
  }
  unique_fd fd(raw);
  std::string out;
  for (;;) {
    auto chunk = pread_some(fd.get(), out.size(), 1 << 16, path);
    out += chunk;
    if (chunk.size() < (1u << 16)) break;
  }
  return out;
}

nlohmann::json parse_json(const fs::path& path, std::string_view text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number past double
    throw store_error(store_error_kind::corrupt, path.string(),
                      path.string() + " is not valid JSON (" + e.what() +
                          "); the store only writes whole files, so it was damaged or edited "
                          "outside cohort: repair it or move it aside");
  }
}

std::optional<nlohmann::json> read_json(const fs::path& path) {
  auto text = read_file(path);
  if (!text) return std::nullopt;
  return parse_json(path, *text);
}

bool create_exclusive(const fs::path& path, std::string_view content) {
  auto temp = temp_path_for(path);
  temp_guard guard(temp);  // the temp name goes in every case; the link (if made) stays
  write_synced(temp, content, store_file_mode);
  bool created = ::link(temp.c_str(), path.c_str()) == 0;
  if (!created) {
    int err = errno;
    struct stat st {};
    // A lost NFS reply makes a successful link look failed: the link count tells the truth.
    if (::stat(temp.c_str(), &st) == 0 && st.st_nlink == 2) {
      created = true;
    } else if (err != EEXIST) {
      errno = err;
      throw_errno("cannot create", path);
    }
  }
  if (created) fsync_dir(path.parent_path());
  return created;
}

void ensure_dir(const fs::path& dir) {
  if (fs::is_directory(dir)) return;
  // Each missing level is made with store_dir_mode (create_directories would take the umask's).
  fs::path level;
  for (const auto& part : dir) {
    level /= part;
    if (::mkdir(level.c_str(), store_dir_mode) != 0 && errno != EEXIST) {
      const int err = errno;
      throw store_error(store_error_kind::io, dir.string(),
                        "cannot create directory " + level.string() + ": " + std::strerror(err));
    }
  }
  if (!fs::is_directory(dir))
    throw store_error(store_error_kind::io, dir.string(), dir.string() + " is not a directory");
  fsync_dir(dir.parent_path().empty() ? fs::path(".") : dir.parent_path());
}

void fsync_dir(const fs::path& dir) {
  auto fd = open_or_throw(dir.empty() ? fs::path(".") : dir, O_RDONLY | O_DIRECTORY);
  // Some file systems refuse fsync on directories (EINVAL); their renames are already ordered.
  if (::fsync(fd.get()) != 0 && errno != EINVAL) throw_errno("cannot fsync directory", dir);
}

}  // namespace cohort::core::store

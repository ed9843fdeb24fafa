// Job ids and their allocation (see job_ids.hpp).
#include "core/store/job_ids.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

#include "core/store/atomic_file.hpp"
#include "core/store/store_error.hpp"
#include "core/store/store_paths.hpp"

namespace cohort::core::store {

std::string format_job_id(std::int64_t number) {
  char id[32];
  std::snprintf(id, sizeof id, "job-%04lld", static_cast<long long>(number));
  return id;
}

std::optional<std::int64_t> parse_job_id(const std::string& job_id) {
  const std::string prefix = "job-";
  if (job_id.size() <= prefix.size() || job_id.size() > prefix.size() + 18 ||
      job_id.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  std::int64_t n = 0;
  for (std::size_t i = prefix.size(); i < job_id.size(); ++i) {
    char c = job_id[i];
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

bool job_id_less(const std::string& a, const std::string& b) {
  auto na = parse_job_id(a), nb = parse_job_id(b);
  if (na && nb) return *na != *nb ? *na < *nb : a < b;
  if (na || nb) return na.has_value();
  return a < b;
}

job_id_lock::job_id_lock(const std::filesystem::path& store_dir) : store_dir_(store_dir) {
  ensure_dir(cluster_dir(store_dir_));
  ensure_dir(jobs_dir(store_dir_));
  auto lock_path = cluster_dir(store_dir_) / "next_job_id.lock";
  fd_ = open_or_throw(lock_path, O_RDWR | O_CREAT, store_file_mode);
  struct flock request {};
  request.l_type = F_WRLCK;
  request.l_whence = SEEK_SET;
  int rc;
  do {
    rc = ::fcntl(fd_.get(), F_OFD_SETLKW, &request);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) throw_errno("cannot lock", lock_path);
}

std::string job_id_lock::take_next() {
  auto counter_path = next_job_id_path(store_dir_);
  std::int64_t next = 1;
  if (auto stored = read_json(counter_path)) {
    if (!stored->is_number_integer() || stored->get<std::int64_t>() < 1)
      throw store_error(store_error_kind::corrupt, counter_path.string(),
                        counter_path.string() +
                            " must hold one integer >= 1 (the next job number); it was damaged or "
                            "edited: set it above the highest job number in " +
                            jobs_dir(store_dir_).string());
    next = stored->get<std::int64_t>();
  }
  std::error_code ec;
  for (std::filesystem::directory_iterator it(jobs_dir(store_dir_), ec), end; !ec && it != end;
       it.increment(ec)) {
    if (auto n = parse_job_id(it->path().filename().string())) next = std::max(next, *n + 1);
  }
  if (ec)
    throw store_error(store_error_kind::io, jobs_dir(store_dir_).string(),
                      "cannot list " + jobs_dir(store_dir_).string() + ": " + ec.message());
  next = std::max(next, taken_ + 1);
  for (;; ++next) {
    auto dir = jobs_dir(store_dir_) / format_job_id(next);
    if (::mkdir(dir.c_str(), store_dir_mode) == 0) break;
    if (errno != EEXIST) throw_errno("cannot create job directory", dir);
  }
  fsync_dir(jobs_dir(store_dir_));
  taken_ = next;
  return format_job_id(next);
}

void job_id_lock::commit() {
  if (taken_ > 0) write_json_atomic(next_job_id_path(store_dir_), nlohmann::json(taken_ + 1));
}

}  // namespace cohort::core::store

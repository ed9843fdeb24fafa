// The one exception type of the cluster store: what failed, on which path, and of which kind, so
// callers can tell "another head took over" (fenced) from a broken file (corrupt) or a failing
// disk.
#pragma once

#include <stdexcept>
#include <string>

namespace cohort::core::store {

enum class store_error_kind {
  io,         // a system call failed (permissions, disk full, NFS error)
  corrupt,    // a file exists but is not what the store wrote (JSON parse error, wrong fields)
  fenced,     // the writer's epoch is not the current leader epoch: another head took over
  invalid,    // a bad argument (unsafe name, non-object state, unparseable spec)
  not_found,  // the job a write refers to does not exist
};

const char* to_string(store_error_kind kind);

class store_error : public std::runtime_error {
 public:
  store_error(store_error_kind kind, std::string path, const std::string& message);
  store_error_kind kind() const { return kind_; }
  // The file or directory concerned; empty when none.
  const std::string& path() const { return path_; }

 private:
  store_error_kind kind_;
  std::string path_;
};

}  // namespace cohort::core::store

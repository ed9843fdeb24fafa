// A store on a directory (one machine, or a shared NFS / ReadWriteMany mount): one file per key,
// written to a temporary name and renamed into place; add() holds an flock on <dir>/.lock.
// get() polls the directory (backing off up to 50 ms). Fallback when no TCP store is served.
#pragma once

#include "core/comm/store.hpp"

#include <filesystem>

namespace cohort::core::comm {

class file_store final : public store {
 public:
  // Creates dir when missing; throws comm_error (store_failure) when it cannot.
  explicit file_store(std::filesystem::path dir);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;

 private:
  std::filesystem::path path_of(const std::string& key, const char* where) const;
  void write_atomically(const std::filesystem::path& path, const std::string& value);

  std::filesystem::path dir_;
};

}  // namespace cohort::core::comm

// A fresh directory under the system temp dir, removed with everything in it when the test ends.
// One per test; the shared test fixtures of every area use it.
#pragma once

#include <atomic>
#include <filesystem>
#include <random>
#include <string>

#include <unistd.h>

#include "tests/support/files.hpp"

namespace cohort::test {

class temp_dir {
 public:
  explicit temp_dir(const std::string& tag = "cohort-test") {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            (tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
             std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // The path of `child` inside the directory.
  std::string path(const std::string& child) const { return (path_ / child).string(); }
  // Writes `content` to `name` (creating its directories); returns the file's path.
  std::string write(const std::string& name, const std::string& content) const {
    const std::string file = path(name);
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    write_file(file, content);
    return file;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace cohort::test

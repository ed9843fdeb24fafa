// A fresh directory under the system temp dir, removed when the test ends.
#pragma once

#include <filesystem>
#include <random>
#include <string>

namespace cohort::test {

class temp_dir {
 public:
  explicit temp_dir(const std::string& tag = "cohort-test") {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            (tag + "-" + std::to_string(rd()) + std::to_string(rd()));
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

 private:
  std::filesystem::path path_;
};

}  // namespace cohort::test

// A read-only memory mapping of one whole file (RAII; movable, not copyable). An empty file maps
// to a null data() with size() 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort::core::data {

class mapped_file {
 public:
  mapped_file() = default;
  explicit mapped_file(const std::string& path);  // throws data_error naming the path
  ~mapped_file();
  mapped_file(mapped_file&& other) noexcept;
  mapped_file& operator=(mapped_file&& other) noexcept;
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace cohort::core::data

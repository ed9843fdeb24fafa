// Streaming XXH64 (the xxHash 64-bit digest) for shard checksums: feed bytes in any split, the
// digest equals XXH64 of the concatenation. Not thread-safe; one instance per stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort::core::data {

class xxh64_stream {
 public:
  explicit xxh64_stream(std::uint64_t seed = 0);
  void update(const void* data, std::size_t size);
  std::uint64_t digest() const;
  std::string hex_digest() const;  // 16 lowercase hex digits

 private:
  std::uint64_t seed_;
  std::uint64_t acc_[4];
  std::uint64_t total_ = 0;
  unsigned char buffer_[32];
  std::size_t buffered_ = 0;
};

std::uint64_t xxh64(const void* data, std::size_t size, std::uint64_t seed = 0);
std::string to_hex64(std::uint64_t value);

}  // namespace cohort::core::data

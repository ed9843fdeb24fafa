// The TCP store's wire format, shared by tcp_store (client) and tcp_store_server: frames of
// u32 little-endian payload length + payload; bounded sizes; a reader that never reads past the
// frame and reports malformed input instead of throwing. Internal to core/comm.
#pragma once

#include "core/comm/store.hpp"

#include <cstdint>
#include <cstring>
#include <string>

namespace cohort::core::comm::wire {

enum class op : std::uint8_t { set = 1, get = 2, add = 3, check = 4, remove = 5 };
enum class status : std::uint8_t { ok = 0, timeout = 1, error = 2 };

inline constexpr std::size_t max_check_keys = 1024;
// Largest payload either side accepts: a SET of the largest key and value, or a CHECK of
// max_check_keys keys, plus headers.
inline constexpr std::size_t max_frame_bytes =
    max_store_value_bytes + max_check_keys * (max_store_key_bytes + 4) + 64;

inline void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
inline void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_str(std::string& out, const std::string& s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out += s;
}
// Prefixes payload with its length.
inline std::string frame(const std::string& payload) {
  std::string out;
  out.reserve(payload.size() + 4);
  put_u32(out, static_cast<std::uint32_t>(payload.size()));
  out += payload;
  return out;
}
inline std::uint32_t read_u32_at(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Reads fields from one payload; any read past the end (or an over-long string) clears ok().
class reader {
 public:
  reader(const char* data, std::size_t size) : data_(data), size_(size) {}
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == size_; }
  std::uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<std::uint8_t>(data_[pos_++]);
  }
  std::uint32_t u32() {
    if (!need(4)) return 0;
    const auto v = read_u32_at(data_ + pos_);
    pos_ += 4;
    return v;
  }
  std::uint64_t u64() {
    if (!need(8)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= std::uint64_t(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  std::string str(std::size_t max_bytes) {
    const std::uint32_t n = u32();
    if (!ok_ || n > max_bytes || !need(n)) {
      ok_ = false;
      return {};
    }
    std::string s(data_ + pos_, n);
    pos_ += n;
    return s;
  }

 private:
  bool need(std::size_t n) {
    if (!ok_ || size_ - pos_ < n) ok_ = false;
    return ok_;
  }
  const char* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace cohort::core::comm::wire

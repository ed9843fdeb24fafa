// Streaming XXH64 (the xxHash 64-bit digest) for shard checksums (see checksum.hpp).
#include "core/data/checksum.hpp"

#include <cstring>

namespace cohort::core::data {
namespace {

constexpr std::uint64_t p1 = 11400714785074694791ULL;
constexpr std::uint64_t p2 = 14029467366897019727ULL;
constexpr std::uint64_t p3 = 1609587929392839161ULL;
constexpr std::uint64_t p4 = 9650029242287828579ULL;
constexpr std::uint64_t p5 = 2870177450012600261ULL;

std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

std::uint64_t read64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, aarch64)
}

std::uint32_t read32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::uint64_t round(std::uint64_t acc, std::uint64_t input) {
  acc += input * p2;
  acc = rotl(acc, 31);
  return acc * p1;
}

std::uint64_t merge_round(std::uint64_t acc, std::uint64_t val) {
  acc ^= round(0, val);
  return acc * p1 + p4;
}

}  // namespace

xxh64_stream::xxh64_stream(std::uint64_t seed) : seed_(seed) {
  acc_[0] = seed + p1 + p2;
  acc_[1] = seed + p2;
  acc_[2] = seed;
  acc_[3] = seed - p1;
}

void xxh64_stream::update(const void* data, std::size_t size) {
  auto p = static_cast<const unsigned char*>(data);
  total_ += size;
  if (buffered_ > 0) {
    std::size_t take = 32 - buffered_ < size ? 32 - buffered_ : size;
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ < 32) return;
    for (int i = 0; i < 4; ++i) acc_[i] = round(acc_[i], read64(buffer_ + 8 * i));
    buffered_ = 0;
  }
  while (size >= 32) {
    acc_[0] = round(acc_[0], read64(p));
    acc_[1] = round(acc_[1], read64(p + 8));
    acc_[2] = round(acc_[2], read64(p + 16));
    acc_[3] = round(acc_[3], read64(p + 24));
    p += 32;
    size -= 32;
  }
  std::memcpy(buffer_, p, size);
  buffered_ = size;
}

std::uint64_t xxh64_stream::digest() const {
  std::uint64_t h;
  if (total_ >= 32) {
    h = rotl(acc_[0], 1) + rotl(acc_[1], 7) + rotl(acc_[2], 12) + rotl(acc_[3], 18);
    for (int i = 0; i < 4; ++i) h = merge_round(h, acc_[i]);
  } else {
    h = seed_ + p5;
  }
  h += total_;
  const unsigned char* p = buffer_;
  std::size_t left = buffered_;
  while (left >= 8) {
    h ^= round(0, read64(p));
    h = rotl(h, 27) * p1 + p4;
    p += 8;
    left -= 8;
  }
  if (left >= 4) {
    h ^= static_cast<std::uint64_t>(read32(p)) * p1;
    h = rotl(h, 23) * p2 + p3;
    p += 4;
    left -= 4;
  }
  while (left > 0) {
    h ^= (*p) * p5;
    h = rotl(h, 11) * p1;
    ++p;
    --left;
  }
  h ^= h >> 33;
  h *= p2;
  h ^= h >> 29;
  h *= p3;
  h ^= h >> 32;
  return h;
}

std::string xxh64_stream::hex_digest() const { return to_hex64(digest()); }

std::uint64_t xxh64(const void* data, std::size_t size, std::uint64_t seed) {
  xxh64_stream s(seed);
  s.update(data, size);
  return s.digest();
}

std::string to_hex64(std::uint64_t value) {
  static const char digits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[i] = digits[value & 0xF];
    value >>= 4;
  }
  return out;
}

}  // namespace cohort::core::data

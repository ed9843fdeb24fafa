// Structural check of a msgpack frame against frame_limits, before decoding (see frame_check.hpp).
#include "net/frame_check.hpp"

#include <stdexcept>

#include <msgpack.hpp>

namespace cohort::net {

void validate(const frame_limits& l) {
  auto require = [](bool ok, const char* field, const char* allowed) {
    if (!ok)
      throw std::invalid_argument(std::string{"frame_limits."} + field + " is out of range: "
                                  + allowed);
  };
  require(l.max_frame_bytes >= 16 && l.max_frame_bytes <= (1ull << 31), "max_frame_bytes",
          "allowed 16 bytes .. 2 GiB");
  require(l.max_container_elements >= 1, "max_container_elements", "must be at least 1");
  require(l.max_string_bytes >= 1, "max_string_bytes", "must be at least 1");
  require(l.max_depth >= 2 && l.max_depth <= 256, "max_depth",
          "allowed 2 .. 256 (the envelope and body take 2)");
}

namespace {

// Visitor for msgpack::parse; returning false stops the parse with `error` set.
class limit_visitor : public msgpack::null_visitor {
public:
  limit_visitor(std::size_t size, const frame_limits& limits) : size_(size), limits_(limits) {}

  bool visit_nil() { return item(); }
  bool visit_boolean(bool) { return item(); }
  bool visit_positive_integer(std::uint64_t) { return item(); }
  bool visit_negative_integer(std::int64_t) { return item(); }
  bool visit_float32(float) { return item(); }
  bool visit_float64(double) { return item(); }
  bool visit_str(const char*, std::uint32_t n) {
    return item() && within(n, limits_.max_string_bytes, "string");
  }
  bool visit_bin(const char*, std::uint32_t n) {
    return item() && within(n, limits_.max_bin_bytes, "bin");
  }
  bool visit_ext(const char*, std::uint32_t n) {
    return item() && within(n, limits_.max_ext_bytes, "ext");
  }
  bool start_array(std::uint32_t n) { return container(n, n, "array"); }
  bool start_map(std::uint32_t n) { return container(n, 2ull * n, "map"); }
  bool end_array() { return close(); }
  bool end_map() { return close(); }
  void parse_error(std::size_t, std::size_t at) {
    set(frame_error::malformed, "not valid msgpack at byte " + std::to_string(at));
  }
  void insufficient_bytes(std::size_t, std::size_t at) {
    set(frame_error::truncated, "msgpack ends early at byte " + std::to_string(at));
  }

  frame_error error = frame_error::none;
  std::string detail;

private:
  // Every value occupies at least one byte, and fills one slot of an open container.
  bool item() {
    ++items_;
    if (outstanding_ > 0)
      --outstanding_;
    return true;
  }
  bool within(std::uint32_t n, std::uint32_t limit, const char* what) {
    if (n <= limit)
      return true;
    set(frame_error::limit_exceeded, std::string{what} + " of " + std::to_string(n)
                                       + " bytes exceeds the limit of " + std::to_string(limit));
    return false;
  }
  bool container(std::uint32_t n, std::uint64_t slots, const char* what) {
    item();
    if (n > limits_.max_container_elements) {
      set(frame_error::limit_exceeded, std::string{what} + " of " + std::to_string(n)
                                         + " elements exceeds the limit of "
                                         + std::to_string(limits_.max_container_elements));
      return false;
    }
    if (++depth_ > limits_.max_depth) {
      set(frame_error::limit_exceeded,
          "nesting deeper than the limit of " + std::to_string(limits_.max_depth));
      return false;
    }
    outstanding_ += slots;
    if (items_ > size_ || outstanding_ > size_ - items_) {
      set(frame_error::truncated, std::string{what} + " claims " + std::to_string(n)
                                    + " elements but the frame has only "
                                    + std::to_string(size_) + " bytes");
      return false;
    }
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }
  void set(frame_error e, std::string d) {
    if (error == frame_error::none) {
      error = e;
      detail = std::move(d);
    }
  }

  std::size_t size_;
  const frame_limits& limits_;
  std::uint64_t items_ = 0;
  std::uint64_t outstanding_ = 0;
  std::uint32_t depth_ = 0;
};

} // namespace

frame_check_result check_frame(const char* data, std::size_t size, const frame_limits& limits) {
  if (size > limits.max_frame_bytes)
    return {frame_error::oversized, "frame of " + std::to_string(size)
                                      + " bytes exceeds the limit of "
                                      + std::to_string(limits.max_frame_bytes)};
  if (size == 0)
    return {frame_error::truncated, "empty frame"};
  limit_visitor v{size, limits};
  std::size_t off = 0;
  bool ok = false;
  try {
    ok = msgpack::parse(data, size, off, v);
  } catch (const std::exception& e) {
    return {frame_error::malformed, std::string{"msgpack parser failed: "} + e.what()};
  }
  if (v.error != frame_error::none)
    return {v.error, std::move(v.detail)};
  if (!ok)
    return {frame_error::malformed, "not valid msgpack"};
  if (off != size)
    return {frame_error::malformed, std::to_string(size - off) + " bytes after the envelope"};
  return {};
}

} // namespace cohort::net

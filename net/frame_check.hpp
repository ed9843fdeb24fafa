// Structural check of a msgpack frame against frame_limits, done before any msgpack object is
// built: it walks the bytes with msgpack's visitor parser (no allocation beyond its stack) and
// refuses containers that claim more elements than the rest of the frame could hold.
#pragma once

#include <cstddef>
#include <string>

#include "net/frame_error.hpp"
#include "net/frame_limits.hpp"

namespace cohort::net {

struct frame_check_result {
  frame_error error = frame_error::none;
  std::string detail;
};

frame_check_result check_frame(const char* data, std::size_t size, const frame_limits& limits);

} // namespace cohort::net

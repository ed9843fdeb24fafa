// Why a frame was refused, and per-reason counters (see frame_error.hpp).
#include "net/frame_error.hpp"

#include <numeric>

namespace cohort::net {

const char* to_string(frame_error e) {
  switch (e) {
    case frame_error::none: return "none";
    case frame_error::oversized: return "oversized";
    case frame_error::truncated: return "truncated";
    case frame_error::malformed: return "malformed";
    case frame_error::limit_exceeded: return "limit_exceeded";
    case frame_error::bad_envelope: return "bad_envelope";
    case frame_error::wrong_version: return "wrong_version";
    case frame_error::unknown_type: return "unknown_type";
    case frame_error::bad_body: return "bad_body";
    case frame_error::multipart: return "multipart";
  }
  return "invalid frame_error";
}

std::uint64_t frame_stats::refused_total() const {
  return std::accumulate(refused.begin(), refused.end(), std::uint64_t{0});
}

frame_stats frame_counters::snapshot() const {
  frame_stats s;
  s.accepted = accepted_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < frame_error_count; ++i)
    s.refused[i] = refused_[i].load(std::memory_order_relaxed);
  s.send_dropped = send_dropped_.load(std::memory_order_relaxed);
  s.send_unroutable = send_unroutable_.load(std::memory_order_relaxed);
  s.handler_errors = handler_errors_.load(std::memory_order_relaxed);
  s.handshake_failures = handshake_failures_.load(std::memory_order_relaxed);
  return s;
}

} // namespace cohort::net

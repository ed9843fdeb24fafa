// Why a frame was refused, and thread-safe per-reason counters (written by a socket's loop
// thread, read from any thread).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace cohort::net {

enum class frame_error : std::uint8_t {
  none,
  oversized,      // frame larger than frame_limits::max_frame_bytes
  truncated,      // msgpack ends early, or a container claims more elements than the frame holds
  malformed,      // not msgpack, or bytes after the envelope
  limit_exceeded, // a container, string, bin, ext or the nesting exceeds frame_limits
  bad_envelope,   // not [version, type_id, body]
  wrong_version,  // envelope version != protocol_version
  unknown_type,   // type id not in the registry
  bad_body,       // fields of the wrong type, count or range
  multipart,      // more than one frame in a message
};
constexpr frame_error wire_enum_max(frame_error) { return frame_error::multipart; }

inline constexpr std::size_t frame_error_count = static_cast<std::size_t>(frame_error::multipart) + 1;

const char* to_string(frame_error e);

// A copy of the counters at one moment.
struct frame_stats {
  std::uint64_t accepted = 0;                               // frames decoded and delivered
  std::array<std::uint64_t, frame_error_count> refused{};   // indexed by frame_error
  std::uint64_t send_dropped = 0;     // outgoing frame dropped: high-water mark or not connected
  std::uint64_t send_unroutable = 0;  // outgoing frame to a peer the ROUTER does not know
  std::uint64_t handler_errors = 0;   // the message handler threw
  std::uint64_t handshake_failures = 0; // CURVE/ZAP handshakes that failed on this socket

  std::uint64_t refused_for(frame_error e) const { return refused[static_cast<std::size_t>(e)]; }
  std::uint64_t refused_total() const;
};

class frame_counters {
public:
  void count_accepted() { accepted_.fetch_add(1, std::memory_order_relaxed); }
  void count_refused(frame_error e) {
    refused_[static_cast<std::size_t>(e)].fetch_add(1, std::memory_order_relaxed);
  }
  void count_send_dropped() { send_dropped_.fetch_add(1, std::memory_order_relaxed); }
  void count_send_unroutable() { send_unroutable_.fetch_add(1, std::memory_order_relaxed); }
  void count_handler_error() { handler_errors_.fetch_add(1, std::memory_order_relaxed); }
  void count_handshake_failure() { handshake_failures_.fetch_add(1, std::memory_order_relaxed); }
  frame_stats snapshot() const;

private:
  std::atomic<std::uint64_t> accepted_{0};
  std::array<std::atomic<std::uint64_t>, frame_error_count> refused_{};
  std::atomic<std::uint64_t> send_dropped_{0};
  std::atomic<std::uint64_t> send_unroutable_{0};
  std::atomic<std::uint64_t> handler_errors_{0};
  std::atomic<std::uint64_t> handshake_failures_{0};
};

} // namespace cohort::net

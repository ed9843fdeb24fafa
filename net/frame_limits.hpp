// Limits on what one received frame may contain. Every frame is checked against them before any
// msgpack object is built, so a hostile frame cannot make the decoder allocate more than a small
// multiple of its own size.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::net {

// The version every frame carries; a frame with another version is refused. It stays 1: the
// worker link's first frame (link_hello, actors/worker_process_link.hpp) must read the same to
// every build so that either end can name both link versions; what changes is versioned inside
// (worker_link_version), and a cluster message whose fields changed fails its decode, named.
inline constexpr std::uint32_t protocol_version = 1;

struct frame_limits {
  std::size_t max_frame_bytes = 16u << 20;      // one ZeroMQ frame
  std::uint32_t max_container_elements = 1u << 20; // per msgpack array / map (pairs)
  std::uint32_t max_string_bytes = 8u << 20;    // per msgpack str
  std::uint32_t max_bin_bytes = 8u << 20;       // per msgpack bin
  std::uint32_t max_ext_bytes = 0;              // the protocol uses no ext types
  std::uint32_t max_depth = 32;                 // nested containers, the envelope included
};

// Throws std::invalid_argument naming the field when a limit is zero or out of range.
void validate(const frame_limits& limits);

} // namespace cohort::net

// Ring reduce-scatter over Gloo's unbound buffers (Gloo ships none with timeouts): after
// size-1 steps rank r holds the reduction of chunk r. Bandwidth-optimal: each rank sends
// (size-1)/size of the data once. Internal to the Gloo backend.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace cohort::core::comm {

// data (size * chunk) is reduced in place; only chunk rank() is complete afterwards.
// reduce(c, a, b, n) writes a op b into c. Throws when a peer fails, the wait times out or the
// group is aborted.
template <typename T>
void ring_reduce_scatter(gloo::Context& ctx, T* data, std::size_t chunk,
                         void (*reduce)(void*, const void*, const void*, std::size_t),
                         std::uint32_t tag, std::chrono::milliseconds timeout) {
  const int n = ctx.size;
  const int r = ctx.rank;
  if (n == 1) return;
  const std::size_t chunk_bytes = chunk * sizeof(T);
  std::vector<T> incoming(chunk);
  auto send_buf = ctx.createUnboundBuffer(data, chunk_bytes * static_cast<std::size_t>(n));
  auto recv_buf = ctx.createUnboundBuffer(incoming.data(), chunk_bytes);
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  // Slots of the form 0x30 <prefix byte> | tag | step keep clear of Gloo's own prefixes (1..8).
  const std::uint64_t base = (std::uint64_t{0x30} << 56) | (std::uint64_t{tag} << 16);
  for (int step = 0; step < n - 1; ++step) {
    const int send_idx = (r - step - 1 + 2 * n) % n;
    const int recv_idx = (r - step - 2 + 2 * n) % n;
    const std::uint64_t slot = base | static_cast<std::uint64_t>(step);
    recv_buf->recv(left, slot);
    send_buf->send(right, slot, static_cast<std::size_t>(send_idx) * chunk_bytes, chunk_bytes);
    if (!recv_buf->waitRecv(timeout))
      throw std::runtime_error("reduce_scatter: receive from rank " + std::to_string(left) + " aborted");
    T* target = data + static_cast<std::size_t>(recv_idx) * chunk;
    reduce(target, target, incoming.data(), chunk);
    if (!send_buf->waitSend(timeout))
      throw std::runtime_error("reduce_scatter: send to rank " + std::to_string(right) + " aborted");
  }
}

}  // namespace cohort::core::comm

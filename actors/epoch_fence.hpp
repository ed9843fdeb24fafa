// The fence a node process puts between itself and deposed heads: the highest leader epoch it
// has seen (from a leader's process_welcome and from the commands it admitted), and the refusal
// of every head→node and head→trainer command (start_trainer, stop_attempt, checkpoint_attempt,
// release_attempt, log_ack) that carries an older epoch. A head woken from SIGSTOP after a
// standby took over still believes it leads until its next lease renewal; what it sends meanwhile
// is refused here. Epoch 0 is an embedded cluster's (no store, no lease): it is admitted while no
// leader of a real epoch has been seen. Shared by a node actor and its trainers; thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace cohort::actors {

class epoch_fence {
 public:
  // Raises the highest epoch seen to `epoch`; never lowers it.
  void observe(std::int64_t epoch) {
    auto seen = highest_.load();
    while (epoch > seen && !highest_.compare_exchange_weak(seen, epoch)) {
    }
  }
  std::int64_t highest() const { return highest_.load(); }

  // Whether the command `what` (e.g. "stop_attempt of job 7 attempt 2"), sent by the head of
  // `epoch`, may run: nullopt when it may (its epoch becomes the highest seen when it is newer),
  // else why it is refused, naming both epochs. The refused count grows by one.
  std::optional<std::string> refuse(std::int64_t epoch, const std::string& what) {
    observe(epoch);
    const auto seen = highest_.load();
    if (epoch >= seen) return std::nullopt;
    ++refused_;
    return "refused " + what + ": it comes from the head of epoch " + std::to_string(epoch) +
           ", but the head of epoch " + std::to_string(seen) +
           " leads now (a deposed head's command is fenced)";
  }
  // Commands refused so far.
  std::uint64_t refused() const { return refused_.load(); }

 private:
  std::atomic<std::int64_t> highest_{0};
  std::atomic<std::uint64_t> refused_{0};
};

}  // namespace cohort::actors

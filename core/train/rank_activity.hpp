// What a rank is doing besides its steps, as its heartbeats tell the trainer: saving a checkpoint
// (with the bytes moved so far: written, and uploaded where the run is in S3), waiting for its
// commit, exporting the final model (downloaded, written, uploaded), or done with its run. The
// trainer's hang detector judges a saving or exporting rank by whether its bytes advance
// (run.failure.checkpoint_timeout_s) instead of by its step, never names a rank that is done, and
// `submit status` shows the phase ("saving checkpoint step 20: 41.0 of 79.0 GB").
// Torch-free: cohort-worker's heartbeat thread and the actors read it.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace cohort::core::train {

enum class rank_phase : std::int32_t {
  training = 0,    // running steps (the step allowance applies)
  saving = 1,      // the rank's thread waits for its checkpoint shard to be written
  committing = 2,  // rank 0 waits for every rank's report, then commits
  exporting = 3,   // rank 0 writes the final model in Hugging Face format
  finished = 4,    // the run is over on this rank; its process is closing
};
// The phase with wire value `value`; training for a value no phase has (a newer peer's).
inline rank_phase rank_phase_of(std::int32_t value) {
  return value >= 0 && value <= static_cast<std::int32_t>(rank_phase::finished) ? static_cast<rank_phase>(value)
                                                                                 : rank_phase::training;
}

// One reading of a rank_activity, as a heartbeat carries it.
struct activity_reading {
  rank_phase phase = rank_phase::training;
  std::int64_t step = 0;  // the checkpoint's (or export's) step
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;
};

// Written by the rank's threads (its step loop, the checkpoint writer), read by the heartbeat.
// The byte counts belong to the newest write (start_write), whatever the phase: an asynchronous
// save writes while the rank trains, and a later wait for it shows how far it got.
class rank_activity {
 public:
  void set_phase(rank_phase p) { phase_.store(static_cast<std::int32_t>(p)); }
  // Only when the phase is `from` (the writer thread moves a waiting rank on, never a training one).
  void advance_phase(rank_phase from, rank_phase to) {
    auto expected = static_cast<std::int32_t>(from);
    phase_.compare_exchange_strong(expected, static_cast<std::int32_t>(to));
  }
  void start_write(std::int64_t step, std::uint64_t bytes_total) {
    bytes_done_.store(0);
    bytes_total_.store(bytes_total);
    step_.store(step);
  }
  void add_bytes(std::uint64_t n) { bytes_done_.fetch_add(n); }
  void set_bytes(std::uint64_t done, std::uint64_t total) {
    bytes_total_.store(total);
    bytes_done_.store(done);
  }
  activity_reading read() const {
    return {rank_phase_of(phase_.load()), step_.load(), bytes_done_.load(), bytes_total_.load()};
  }

 private:
  std::atomic<std::int32_t> phase_{0};
  std::atomic<std::int64_t> step_{0};
  std::atomic<std::uint64_t> bytes_done_{0};
  std::atomic<std::uint64_t> bytes_total_{0};
};

// The progress callback of a transfer that follows what `a` counts so far, counted on top of it:
// a shard's upload to S3 after its write (the save's bytes are then written and uploaded ones),
// an export's download, write and upload one after another. The total grows by the transfer's
// when it starts. Empty for a null activity.
inline std::function<void(std::uint64_t, std::uint64_t)> count_after(rank_activity* a) {
  if (a == nullptr) return {};
  const auto before = a->read();
  return [a, before](std::uint64_t done, std::uint64_t total) {
    a->set_bytes(before.bytes_done + done, before.bytes_total + total);
  };
}

// "saving checkpoint step 20: 41.0 of 79.0 GB" (the bytes as given: the trainer sums its ranks');
// "" while training or finished.
inline std::string describe_activity(const activity_reading& a) {
  const auto gb = [](std::uint64_t b) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", static_cast<double>(b) / 1e9);
    return std::string(text);
  };
  const std::string bytes = a.bytes_total > 0 ? ": " + gb(a.bytes_done) + " of " + gb(a.bytes_total) + " GB" : "";
  const std::string step = std::to_string(a.step);
  switch (a.phase) {
    case rank_phase::saving: return "saving checkpoint step " + step + bytes;
    case rank_phase::committing: return "committing checkpoint step " + step + bytes;
    case rank_phase::exporting: return "exporting the model of step " + step + bytes;
    case rank_phase::training:
    case rank_phase::finished: break;
  }
  return "";
}

// Sets the rank's phase for a scope and puts back the one it had (a null activity: nothing).
class phase_scope {
 public:
  phase_scope(rank_activity* a, rank_phase p) : activity_(a) {
    if (activity_ == nullptr) return;
    before_ = activity_->read().phase;
    activity_->set_phase(p);
  }
  ~phase_scope() {
    if (activity_ != nullptr) activity_->set_phase(before_);
  }
  phase_scope(const phase_scope&) = delete;
  phase_scope& operator=(const phase_scope&) = delete;

 private:
  rank_activity* activity_;
  rank_phase before_ = rank_phase::training;
};

}  // namespace cohort::core::train

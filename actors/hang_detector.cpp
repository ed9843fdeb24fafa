// hang_detector (see hang_detector.hpp).
#include "actors/hang_detector.hpp"

#include <algorithm>
#include <cstdio>

namespace cohort::actors {

namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace

using core::train::rank_phase;

hang_detector::hang_detector(std::vector<std::string> rank_nodes, hang_limits limits, double now_s)
    : nodes_(std::move(rank_nodes)), limits_(limits), ranks_(nodes_.size()) {
  for (auto& r : ranks_) r.advanced_s = r.heard_s = r.phase_since_s = r.bytes_advanced_s = now_s;
}

void hang_detector::on_started(std::int32_t rank, std::int64_t pid) {
  if (rank < 0 || rank >= static_cast<std::int32_t>(ranks_.size())) return;
  ranks_[static_cast<std::size_t>(rank)].pid = pid;
}

void hang_detector::heard(rank_view& r, std::int64_t step, double now_s) {
  r.heard_s = std::max(r.heard_s, now_s);
  r.heard_any = true;
  if (step > r.step) {
    r.step = step;
    r.advanced_s = now_s;
  }
}

void hang_detector::on_progress(std::int32_t rank, std::int64_t step, double now_s) {
  if (rank < 0 || rank >= static_cast<std::int32_t>(ranks_.size())) return;
  auto& r = ranks_[static_cast<std::size_t>(rank)];
  heard(r, step, now_s);
  r.waiting_since_s.reset();
}

void hang_detector::on_heartbeat(std::int32_t rank, std::int64_t step,
                                 std::optional<double> collective_wait_s, double now_s,
                                 const core::train::activity_reading& activity) {
  if (rank < 0 || rank >= static_cast<std::int32_t>(ranks_.size())) return;
  auto& r = ranks_[static_cast<std::size_t>(rank)];
  heard(r, step, now_s);
  if (activity.phase != r.activity.phase || activity.step != r.activity.step) {
    // A new phase: its own clock. Back to training, the step allowance starts again (the save
    // that ended is not the next step's time).
    r.phase_since_s = r.bytes_advanced_s = now_s;
    r.long_phase_told = false;
    if (activity.phase == rank_phase::training) r.advanced_s = std::max(r.advanced_s, now_s);
  } else if (activity.bytes_done != r.activity.bytes_done) {
    r.bytes_advanced_s = now_s;
  }
  r.activity = activity;
  if (collective_wait_s)
    r.waiting_since_s = now_s - std::max(0.0, *collective_wait_s);
  else
    r.waiting_since_s.reset();
}

void hang_detector::on_finished(std::int32_t rank) {
  if (rank < 0 || rank >= static_cast<std::int32_t>(ranks_.size())) return;
  ranks_[static_cast<std::size_t>(rank)].finished = true;
}

bool hang_detector::busy_writing(const rank_view& r) const {
  return r.activity.phase == rank_phase::saving || r.activity.phase == rank_phase::exporting;
}

double hang_detector::allowance(const rank_view& r) const {
  return r.step == 0 ? limits_.startup_timeout_s : limits_.hang_timeout_s;
}

double hang_detector::silence_allowed(const rank_view& r) const {
  return r.heard_any ? limits_.hang_timeout_s : limits_.startup_timeout_s;
}

hang_verdict hang_detector::verdict(std::int32_t rank, double now_s, const std::string& why) const {
  const auto& r = ranks_[static_cast<std::size_t>(rank)];
  hang_verdict v;
  v.rank = rank;
  v.node = nodes_[static_cast<std::size_t>(rank)];
  v.pid = r.pid;
  v.last_step = r.step;
  v.stalled_s = now_s - r.advanced_s;
  v.silent = now_s - r.heard_s > silence_allowed(r);
  v.reason = "hung: rank " + std::to_string(rank) + " on node " + v.node + " (pid " +
             std::to_string(r.pid) + ") made no progress for " + seconds_text(v.stalled_s) +
             (r.step == 0 ? " before its first step" : " after step " + std::to_string(r.step)) +
             " (" + (r.step == 0 && !(v.silent && r.heard_any)
                         ? "run.failure.startup_timeout_s " + seconds_text(limits_.startup_timeout_s)
                         : "run.failure.hang_timeout_s " + seconds_text(limits_.hang_timeout_s)) +
             "); " + why;
  return v;
}

hang_verdict hang_detector::write_verdict(std::int32_t rank, double now_s) const {
  const auto& r = ranks_[static_cast<std::size_t>(rank)];
  hang_verdict v = verdict(rank, now_s, "");
  v.stalled_s = now_s - r.bytes_advanced_s;
  v.reason = "hung: rank " + std::to_string(rank) + " on node " + v.node + " (pid " + std::to_string(r.pid) +
             ") made no progress for " + seconds_text(v.stalled_s) + " while " +
             core::train::describe_activity(r.activity) + " written (run.failure.checkpoint_timeout_s " +
             seconds_text(limits_.checkpoint_timeout_s) + "); it is alive but its write does not advance";
  return v;
}

void hang_detector::hold() { held_ = true; }

void hang_detector::release(double now_s) {
  held_ = false;
  for (auto& r : ranks_) r.advanced_s = std::max(r.advanced_s, now_s);
}

std::optional<hang_verdict> hang_detector::check(double now_s) const {
  std::optional<std::int32_t> silent, busy, last_waiter, writer;
  double silent_stall = -1, busy_stall = -1, latest_wait = -1, writer_stall = -1;
  bool any_stalled = false;
  bool peer_in_phase = false;  // a rank saves, commits or exports: the waiting ranks wait for it
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    const auto& r = ranks_[i];
    if (r.finished) continue;
    const double stalled = now_s - r.advanced_s;
    const auto rank = static_cast<std::int32_t>(i);
    // Heartbeats come from a thread of their own, also while the model loads: once a rank was
    // heard, silence past the hang allowance is a frozen process whatever step it is at (before
    // that, its process is still starting: the startup allowance).
    if (now_s - r.heard_s > silence_allowed(r)) {
      any_stalled = true;
      if (stalled > silent_stall) silent = rank, silent_stall = stalled;
      continue;
    }
    if (held_) continue;
    if (r.activity.phase != rank_phase::training) {
      // Saving or exporting: judged by its bytes (a fresh heartbeat says they do not advance).
      // Committing or finished: by silence alone.
      if (busy_writing(r) && now_s - r.bytes_advanced_s > limits_.checkpoint_timeout_s &&
          now_s - r.heard_s <= 2 * heartbeat_interval_s(limits_.hang_timeout_s) &&
          (!writer || now_s - r.bytes_advanced_s > writer_stall))
        writer = rank, writer_stall = now_s - r.bytes_advanced_s;
      if (r.activity.phase != rank_phase::finished) peer_in_phase = true;
      continue;
    }
    if (stalled <= allowance(r)) continue;
    any_stalled = true;
    // What a stalled rank is doing is known only from a fresh heartbeat; one that missed two is
    // judged when it speaks again or falls silent (a stopped rank is named as silent, not busy).
    if (now_s - r.heard_s > 2 * heartbeat_interval_s(limits_.hang_timeout_s)) continue;
    if (!r.waiting_since_s) {
      if (stalled > busy_stall) busy = rank, busy_stall = stalled;
    } else if (*r.waiting_since_s > latest_wait) {
      last_waiter = rank, latest_wait = *r.waiting_since_s;
    }
  }
  if (!any_stalled && !writer) return std::nullopt;
  // Which other ranks were waiting in a collective, for the sentence.
  auto waiting_text = [&](std::int32_t culprit) {
    std::string names;
    for (std::size_t i = 0; i < ranks_.size(); ++i)
      if (static_cast<std::int32_t>(i) != culprit && !ranks_[i].finished && ranks_[i].waiting_since_s)
        names += (names.empty() ? "" : ", ") + std::to_string(i);
    return names.empty() ? std::string() : "; rank(s) " + names + " waited in a collective";
  };
  if (silent) {
    const auto& r = ranks_[static_cast<std::size_t>(*silent)];
    return verdict(*silent, now_s, "no heartbeat for " + seconds_text(now_s - r.heard_s) +
                                       " (stopped or frozen)" + waiting_text(*silent));
  }
  if (busy)
    return verdict(*busy, now_s, "it is alive but not waiting in a collective (stuck in its own work)" +
                                     waiting_text(*busy));
  if (writer) return write_verdict(*writer, now_s);
  if (last_waiter && !peer_in_phase && now_s - latest_wait > limits_.hang_timeout_s) {
    const auto& r = ranks_[static_cast<std::size_t>(*last_waiter)];
    return verdict(*last_waiter, now_s,
                   "every stalled rank waits in a collective; this one began waiting last, " +
                       seconds_text(now_s - *r.waiting_since_s) + " ago");
  }
  return std::nullopt;  // stalled ranks wait in a collective, but not yet past the allowance
}

std::optional<hang_verdict> hang_detector::silent_peer(std::int32_t failed, double now_s) const {
  std::optional<std::int32_t> quietest;
  double longest = limits_.hang_timeout_s / 2;
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    const auto& r = ranks_[i];
    if (static_cast<std::int32_t>(i) == failed || r.finished) continue;
    if (r.heard_any && now_s - r.heard_s >= longest) quietest = static_cast<std::int32_t>(i), longest = now_s - r.heard_s;
  }
  if (!quietest) return std::nullopt;
  return verdict(*quietest, now_s, "no heartbeat for " + seconds_text(longest) + " while rank " +
                                       std::to_string(failed) + " waited on it and failed");
}

std::string hang_detector::activity() const {
  // The export (rank 0, alone) first; else the oldest step being saved or committed.
  std::optional<std::int64_t> oldest;
  for (const auto& r : ranks_) {
    const auto phase = r.activity.phase;
    if (r.finished || phase == rank_phase::training || phase == rank_phase::finished) continue;
    if (phase == rank_phase::exporting) return core::train::describe_activity(r.activity);
    if (!oldest || r.activity.step < *oldest) oldest = r.activity.step;
  }
  if (!oldest) return "";
  core::train::activity_reading sum{rank_phase::committing, *oldest, 0, 0};
  for (const auto& r : ranks_) {
    if (r.finished || r.activity.step != *oldest) continue;
    if (r.activity.phase == rank_phase::saving) sum.phase = rank_phase::saving;
    if (r.activity.phase != rank_phase::saving && r.activity.phase != rank_phase::committing) continue;
    sum.bytes_done += r.activity.bytes_done;
    sum.bytes_total += r.activity.bytes_total;
  }
  return core::train::describe_activity(sum);
}

std::vector<std::string> hang_detector::long_phases(double now_s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    auto& r = ranks_[i];
    const auto phase = r.activity.phase;
    if (r.finished || r.long_phase_told || phase == rank_phase::training || phase == rank_phase::finished ||
        now_s - r.phase_since_s <= limits_.hang_timeout_s)
      continue;
    r.long_phase_told = true;
    out.push_back("rank " + std::to_string(i) + " has been " + core::train::describe_activity(r.activity) +
                  " for longer than run.failure.hang_timeout_s (" + seconds_text(limits_.hang_timeout_s) + "); " +
                  (busy_writing(r) ? "it is judged by its written bytes (run.failure.checkpoint_timeout_s " +
                                         seconds_text(limits_.checkpoint_timeout_s) + ")"
                                   : std::string("it waits for the other ranks' shards")));
  }
  return out;
}

}  // namespace cohort::actors

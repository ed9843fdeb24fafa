// A leading head's term, as its lease in the store allows it: from the lease taken (just before
// the head actor starts) through renewals to stepping down. The head may write to the store and
// command nodes and trainers only while its lease is known good: until 0.9 of the ttl after the
// start of its last successful renewal (a renewal started at t may have been made as late as it
// answered, so the lease is counted from t). A renewal the store did not answer leaves the head
// leading while that time lasts, and ends its term past it (cut off from the store: a standby
// that reaches it may lead by now); a renewal refused (another head claimed a newer epoch) ends
// it at once. A term ends once. Plain and single-threaded (the head actor owns it and renews
// through the store); times are passed in, so tests give their own.
#pragma once

#include <algorithm>
#include <chrono>

namespace cohort::actors {

class leader_session {
 public:
  using clock = std::chrono::steady_clock;

  // The lease was taken (or renewed) just before `now`; the first renewal is counted from half
  // its ttl.
  leader_session(std::chrono::milliseconds ttl, clock::time_point now)
      : ttl_(ttl), valid_until_(now + ttl / 2) {}

  enum class verdict { leads, cut_off, superseded };

  // A renewal started at `started`: `answered` false when the store did not answer, else
  // `renewed` whether this head's epoch still holds the lease.
  verdict on_renewal(clock::time_point started, bool answered, bool renewed, clock::time_point now) {
    if (!answered) return now < valid_until_ ? verdict::leads : verdict::cut_off;
    if (!renewed) return verdict::superseded;
    valid_until_ = std::max(valid_until_, started + ttl_ * 9 / 10);
    return verdict::leads;
  }

  // Whether the head may act now without renewing first.
  bool known_good(clock::time_point now) const { return !ended_ && now < valid_until_; }
  clock::time_point valid_until() const { return valid_until_; }

  // Ends the term: true the first time (the head steps down then), false after.
  bool end() {
    if (ended_) return false;
    ended_ = true;
    return true;
  }
  bool ended() const { return ended_; }

 private:
  std::chrono::milliseconds ttl_;
  clock::time_point valid_until_;
  bool ended_ = false;
};

}  // namespace cohort::actors

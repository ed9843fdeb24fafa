// A head's leadership over the store's leader lease, from start to end, in one place:
//  - taking it: acquire_leadership() takes the lease at once, or waits as a standby (answering
//    with who leads, through a standby_role) until the lease is free or the head is told to stop;
//  - leading: leader_session, the term (below): while the head may act on its lease;
//  - renewing: renew_lease(), one renewal as the lease keeper (store_writer.hpp) runs it every
//    third of the ttl, under the lease_fence;
//  - giving it back: release_lease(), under the same fence, after which no renewal writes;
//  - what others are told: standby_answer() (a standby's reply to every request) and
//    step_down_reason() (a head that stops leading).
// Plain code over core::store::lease_service, so every case runs on the directory and on etcd
// (tests/actors/leader_session_test.cpp); no CAF. cluster-head's main wires it to its signals
// and its standby server.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "core/store/leader_lease.hpp"
#include "net/bridge_messages.hpp"

namespace cohort::actors {

// What a head that waits as a standby does meanwhile: the caller's answers and its stop signal.
class standby_role {
 public:
  virtual ~standby_role() = default;
  // The lease is held by another head: this head is a standby from now on. `leader`: the lease as
  // read (may be expired, or nullopt when a claim was lost to a racing head).
  virtual void begin(const std::optional<core::store::lease_record>& leader) = 0;
  // The lease as read again after another try failed (the leader may have changed).
  virtual void leader_is(const std::optional<core::store::lease_record>& leader) = 0;
  // Waits up to `d` for a reason to stop waiting (a termination signal): true when one came.
  virtual bool stop_within(std::chrono::milliseconds d) = 0;
  // Called once when the wait is over (the lease taken or a stop), before acquire_leadership returns.
  virtual void end() = 0;
};

// Who this head is to the lease: its unique id, the address it serves at, the ttl it asks for.
struct lease_claim {
  std::string head_id;
  std::string address;
  std::chrono::milliseconds ttl{10000};
};

// The leader lease for `claim`: taken at once (no standby role), or after waiting as `standby`
// (begin, then leader_is after each try that failed, end once over). Between tries it waits on the
// store for a change of leader (etcd wakes it at once; the directory cannot watch) or a quarter
// ttl, and on `standby.stop_within`. nullopt when the standby was told to stop first.
std::optional<core::store::lease_record> acquire_leadership(core::store::lease_service& lease,
                                                            const lease_claim& claim, standby_role& standby);

// Shared by the lease keeper and whoever gives the lease back (cluster-head when it cannot serve
// or stops): a renewal and the release run one at a time under `mutex`, and none runs once
// `released` is set. Without it a renewal that read the record before the release could write it
// after, and the lease given back would be held again until its ttl ran out.
struct lease_fence {
  std::mutex mutex;
  bool released = false;  // under mutex
};

// One renewal's outcome: renewed, or not (answered: another head holds a newer epoch, or the
// lease was given back), or no answer (error: what the store said).
struct renewal_outcome {
  bool renewed = false;
  std::string error;  // non-empty: the store did not answer
};

// Renews the lease of `epoch` for `ttl` (naming `address` when given: it is published from then
// on), unless the lease was given back through `fence` (may be null): then not renewed, nothing
// written.
renewal_outcome renew_lease(core::store::lease_service& lease, lease_fence* fence, std::int64_t epoch,
                            std::chrono::milliseconds ttl, const std::optional<std::string>& address);

// Gives the lease of `epoch` back so that a standby takes over at once; no renewal through
// `fence` writes after. False when it was already lost.
bool release_lease(core::store::lease_service& lease, lease_fence& fence, std::int64_t epoch);

// What a head that stops leading tells its log and every client: that it is stepping down, why
// (`what`), and who leads now and where (`leader`, the store's current lease) when another head
// has taken over.
std::string step_down_reason(std::int64_t own_epoch, const std::string& what,
                             const std::optional<core::store::lease_record>& leader);

// What a standby head answers every request and node hello with: not the leader, and where the
// leader serves when the store's lease `leader` is live at `now_ms` (else no address: the lease
// ran out and a standby is about to take it).
net::not_leader standby_answer(const std::optional<core::store::lease_record>& leader, std::int64_t now_ms);

// A leading head's term, as its lease in the store allows it: from the lease taken (just before
// the head actor starts) through renewals to stepping down. The head may write to the store and
// command nodes and trainers only while its lease is known good: until 0.9 of the ttl after the
// start of its last successful renewal (a renewal started at t may have been made as late as it
// answered, so the lease is counted from t). A renewal the store did not answer leaves the head
// leading while that time lasts, and ends its term past it (cut off from the store: a standby
// that reaches it may lead by now); a renewal refused (another head claimed a newer epoch) ends
// it at once. A term ends once. Plain and single-threaded (the head actor owns it and renews
// through the store); times are passed in, so tests give their own.
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

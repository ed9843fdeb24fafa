// A head's leadership from start to end (see leader_session.hpp).
#include "actors/leader_session.hpp"

namespace cohort::actors {

std::optional<core::store::lease_record> acquire_leadership(core::store::lease_service& lease,
                                                            const lease_claim& claim, standby_role& standby) {
  auto held = lease.acquire(claim.head_id, claim.address, claim.ttl);
  if (held) return held;
  standby.begin(lease.current());
  while (!held) {
    // An etcd store wakes the standby as soon as the leader key goes; a stop is then seen within
    // a quarter ttl (the longest a watch waits).
    const bool watched = lease.wait_for_change(claim.ttl / 4);
    if (standby.stop_within(watched ? std::chrono::milliseconds(0) : claim.ttl / 4)) break;
    held = lease.acquire(claim.head_id, claim.address, claim.ttl);
    if (!held) standby.leader_is(lease.current());
  }
  standby.end();
  return held;
}

renewal_outcome renew_lease(core::store::lease_service& lease, lease_fence* fence, std::int64_t epoch,
                            std::chrono::milliseconds ttl, const std::optional<std::string>& address) {
  std::unique_lock<std::mutex> fenced;
  if (fence) fenced = std::unique_lock<std::mutex>(fence->mutex);
  renewal_outcome out;
  if (fence && fence->released) return out;  // given back: this head no longer leads
  try {
    out.renewed = (address ? lease.renew(epoch, ttl, *address) : lease.renew(epoch, ttl)).has_value();
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

bool release_lease(core::store::lease_service& lease, lease_fence& fence, std::int64_t epoch) {
  std::lock_guard<std::mutex> fenced(fence.mutex);
  fence.released = true;
  return lease.release(epoch);
}

std::string step_down_reason(std::int64_t own_epoch, const std::string& what,
                             const std::optional<core::store::lease_record>& leader) {
  std::string out = "this head (epoch " + std::to_string(own_epoch) + ") is stepping down: " + what;
  if (leader && leader->epoch > own_epoch)
    return out + "; it lost the leadership to " + leader->head_id + " at " + leader->address + " (epoch " +
           std::to_string(leader->epoch) + "): connect to " + leader->address;
  return out + "; no other head has published a lease yet: retry once a standby has taken over";
}

net::not_leader standby_answer(const std::optional<core::store::lease_record>& leader, std::int64_t now_ms) {
  const std::string standby = "this head is a standby, not the leader; ";
  if (leader && !leader->expired_at(now_ms))
    return {leader->address, leader->epoch,
            standby + "the leader is " + leader->address + " (epoch " + std::to_string(leader->epoch) + ", " +
                leader->head_id + "): connect to " + leader->address};
  std::string last = leader ? " (the last leader, " + leader->address + " epoch " +
                                  std::to_string(leader->epoch) + ", let its lease expire)"
                            : " (no head ever led on this store)";
  return {"", 0,
          standby + "no head holds a live lease now" + last +
              ": a standby takes over within the lease TTL; retry then"};
}

}  // namespace cohort::actors

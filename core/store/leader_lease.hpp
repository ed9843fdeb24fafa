// The leader lease of a cluster store, with epochs for fencing: at most one head wins each epoch,
// a new holder always gets a higher epoch, and every store write names its epoch so writes of a
// deposed head are refused. One object per head; not thread-safe (separate objects are).
//
// Protocol (all state is files under <store>/cluster/):
//  - epochs/<N> is the claim of epoch N: {epoch, head_id, address, expires_at}. It is created
//    exclusively (create_exclusive: link(2) of a complete temp file, atomic on local disks and on
//    NFS), so two contenders, threads or processes or hosts, can never both win epoch N. The
//    highest claim is the current epoch; its holder is the leader.
//  - leader.json {epoch, head_id, address, expires_at (unix ms)} is the published lease; the holder
//    of the highest epoch rewrites it (atomically) to renew. If it is older than the highest claim
//    (a holder died between claiming and publishing, or a deposed head renewed late) it is ignored
//    and the claim's own expiry counts.
//  - acquire(): if the current lease is ours (same head_id), renew it (same epoch). If it is absent
//    or expired, claim epoch current+1 and publish it. Otherwise someone else holds it: nullopt.
//    Standby heads poll acquire().
// Remaining races, stated honestly:
//  - Expiry compares wall clocks of different hosts: keep them in sync (NTP) and the ttl well above
//    the skew and the renew interval.
//  - A head can believe it leads (its renew just succeeded) while a contender that saw its lease
//    expired claims the next epoch; its next store write or renew then fails (fenced). A fence
//    check reads the claims just before writing, so a write that passed the check right before a
//    takeover may still land after it: the window is one write. Only a storage-side compare-and-
//    swap could close it; NFS has none.
//  - On NFS, a client's directory attribute cache (acdirmin, default 30 s) can hide a new claim
//    from another host for that long; mount the store with lookupcache=positive or actimeo=1, or
//    use a ttl longer than the cache time.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace cohort::core::store {

// Unix time in milliseconds; injectable so tests can move time without sleeping.
using clock_ms = std::function<std::int64_t()>;
std::int64_t system_clock_ms();

struct lease_record {
  std::int64_t epoch = 0;
  std::string head_id;
  std::string address;
  std::int64_t expires_at_ms = 0;

  bool expired_at(std::int64_t now_ms) const { return expires_at_ms <= now_ms; }
  nlohmann::json to_json() const;
  // Throws store_error(corrupt) naming `path` and the bad field.
  static lease_record from_json(const std::filesystem::path& path, const nlohmann::json& j);
};

// What a head needs of a leader lease, whatever keeps it (this directory protocol, or etcd:
// core/store/etcd_store.hpp). The contract every backend keeps: at most one holder per epoch; a
// new holder always gets a higher epoch than every earlier one; an epoch once lost is never held
// again. The comments on leader_lease's methods below are the contract of each call.
class lease_service {
 public:
  virtual ~lease_service() = default;
  virtual std::optional<lease_record> acquire(const std::string& head_id,
                                              const std::string& address,
                                              std::chrono::milliseconds ttl) = 0;
  virtual std::optional<lease_record> renew(std::int64_t epoch, std::chrono::milliseconds ttl) = 0;
  virtual std::optional<lease_record> renew(std::int64_t epoch, std::chrono::milliseconds ttl,
                                            const std::string& address) = 0;
  virtual bool release(std::int64_t epoch) = 0;
  virtual std::optional<lease_record> current() const = 0;
  virtual std::int64_t current_epoch() const = 0;
  // For a standby: blocks up to `timeout` or until the lease may have changed hands (etcd: the
  // leader key was deleted or rewritten), whichever comes first. Returns false at once when the
  // backend cannot watch (the directory): the caller then waits and polls acquire() itself.
  virtual bool wait_for_change(std::chrono::milliseconds timeout) {
    (void)timeout;
    return false;
  }
};

// The lease kept as files of a store directory (the protocol above).
class leader_lease : public lease_service {
 public:
  explicit leader_lease(std::filesystem::path store_dir, clock_ms now = system_clock_ms);

  // Takes or keeps the lease for `head_id` (unique per head process, e.g. host:pid:random).
  // Returns the lease now held, or nullopt when another head holds it or won the race.
  std::optional<lease_record> acquire(const std::string& head_id, const std::string& address,
                                      std::chrono::milliseconds ttl) override;
  // Extends the lease of `epoch` to now + ttl. nullopt when the lease was lost (a higher epoch
  // was claimed): the caller must stop acting as leader.
  std::optional<lease_record> renew(std::int64_t epoch, std::chrono::milliseconds ttl) override;
  // renew, publishing `address` as where the leader serves from now on (a head that asked for
  // any free port learns it only after it took the lease and bound). nullopt when lost.
  std::optional<lease_record> renew(std::int64_t epoch, std::chrono::milliseconds ttl,
                                    const std::string& address) override;
  // Gives the lease up (expires it now) if `epoch` still holds it, so a standby takes over at
  // once. Returns false when it was already lost.
  bool release(std::int64_t epoch) override;

  // The lease of the highest epoch, expired or not; nullopt when no head ever held one.
  std::optional<lease_record> current() const override;
  // The highest epoch claimed so far; 0 when none. What fenced writes compare against.
  std::int64_t current_epoch() const override;

  const std::filesystem::path& store_dir() const { return store_dir_; }

 private:
  std::int64_t highest_claim() const;
  std::optional<lease_record> publish(const lease_record& record);
  std::int64_t expiry(std::chrono::milliseconds ttl) const;

  std::filesystem::path store_dir_;
  clock_ms now_;
};

}  // namespace cohort::core::store

// The etcd backend of the cluster store: the same records as the directory store, kept as keys of
// an etcd v3 cluster through its JSON gateway (etcd_client.hpp), for heads on several hosts
// without a shared disk's lease. Checkpoints and data stay on shared storage; only coordination
// lives here.
//
// Keys, all under the location's prefix P (default /cohort):
//   P/leader              the lease: {head_id, address, expires_at, ttl_ms}, attached to an etcd
//                         lease of the head's ttl (rounded up to whole seconds, at least etcd's
//                         minimum); etcd deletes it when the head stops keeping it alive.
//   P/last_leader         the newest leader's record (no etcd lease), written in the txn that
//                         creates P/leader (its epoch is then its mod_revision) and on every
//                         change, so the epoch survives the leader key and a stale writer is told
//                         who took over.
//   P/next_job_id         the job counter "<last number> <token of the create that took it>",
//                         advanced by a txn that compares its mod_revision, so two writers
//                         never get one id.
//   P/specs/<id>, P/states/<id>              the spec verbatim, the state with "epoch"
//   P/events/<id>/<seq:020>, P/logs/<id>/<seq:020>   one key per history line / output line
//   P/nodes/<name>
//
// Epochs: the epoch of a lease is the create_revision of P/leader when that head created it.
// Revisions only grow, and the key is created afresh by every new holder, so each new leader's
// epoch is higher than every earlier one. Fencing is done by etcd itself: every mutation is one
// txn whose first compare is "P/leader's create_revision == epoch" (epoch 0: "P/last_leader
// never existed"), so the write of a head whose lease expired or was taken lands nowhere, even
// if it believes it still leads; there is no one-write window as with the directory.
// Standbys watch P/leader (wait_for_change) instead of only polling it.
// Renewing keeps the etcd lease alive (/v3/lease/keepalive); the ttl is the one given when the
// lease was acquired. While P/leader exists the lease is live: current() reports it as expiring
// ttl_ms from now (an upper bound); once etcd deleted it, the last leader's record, expired.
// Bounds: a job keeps its newest store_options::etcd_log_lines_kept output lines and
// etcd_events_kept history lines (older keys are deleted in the same txn that adds new ones);
// a spec, state or node record over 1 MiB is refused (etcd's request limit is 1.5 MiB).
// Requests fail over between endpoints (etcd_client.hpp). A write whose answer was lost and was
// retried is applied once: create_job knows its own by a token in the counter; an append by its
// first record being there already, byte for byte (records carry seq, ts and epoch; two store
// objects appending identical records at one epoch in one millisecond would be taken as one).
// Not thread-safe: one owner per object.
#pragma once

#include <map>

#include "core/store/etcd_client.hpp"
#include "core/store/store_backend.hpp"

namespace cohort::core::store {

class etcd_store;

// The leader lease kept in etcd (see above); part of an etcd_store.
class etcd_lease : public lease_service {
 public:
  explicit etcd_lease(etcd_store& store) : store_(store) {}
  std::optional<lease_record> acquire(const std::string& head_id, const std::string& address,
                                      std::chrono::milliseconds ttl) override;
  std::optional<lease_record> renew(std::int64_t epoch, std::chrono::milliseconds ttl) override;
  std::optional<lease_record> renew(std::int64_t epoch, std::chrono::milliseconds ttl,
                                    const std::string& address) override;
  bool release(std::int64_t epoch) override;
  std::optional<lease_record> current() const override;
  std::int64_t current_epoch() const override;
  // Watches P/leader from just after its last change: returns at once when it is gone, else
  // when etcd reports it deleted or rewritten, or after `timeout`. True (it waited) unless
  // etcd did not answer or the watch failed early.
  bool wait_for_change(std::chrono::milliseconds timeout) override;

 private:
  etcd_store& store_;
};

class etcd_store : public store_backend {
 public:
  // Connects lazily: the first call that needs etcd fails (store_error io) if none answers.
  explicit etcd_store(etcd_location location, store_options options = {},
                      clock_ms now = system_clock_ms,
                      std::chrono::milliseconds call_timeout = std::chrono::seconds(5));

  const store_options& options() const override { return options_; }
  const clock_ms& clock() const override { return now_; }
  std::string location() const override { return client_.location().text; }
  lease_service& lease() override { return lease_; }
  const lease_service& lease() const override { return lease_; }

  std::string create_job(std::int64_t epoch, const std::string& spec_json) override;
  // Takes the id in the counter alone; create_reserved_job puts specs/<id>.
  std::string reserve_job_id(std::int64_t epoch) override;
  void create_reserved_job(std::int64_t epoch, const std::string& job_id,
                           const std::string& spec_json) override;
  void write_state(std::int64_t epoch, const std::string& job_id,
                   const nlohmann::json& state) override;
  void append_event(std::int64_t epoch, const std::string& job_id, nlohmann::json event) override;
  void append_logs(std::int64_t epoch, const std::string& job_id,
                   std::vector<nlohmann::json> lines) override;
  std::vector<stored_job> list_jobs() const override;
  std::optional<stored_job> load_job(const std::string& job_id) const override;
  std::vector<nlohmann::json> read_events(const std::string& job_id) const override;
  std::vector<nlohmann::json> read_logs(const std::string& job_id,
                                        std::int64_t after_seq = 0) const override;
  void write_node(std::int64_t epoch, const std::string& name,
                  const nlohmann::json& node) override;
  void remove_node(std::int64_t epoch, const std::string& name) override;
  std::vector<nlohmann::json> list_nodes() const override;

 private:
  friend class etcd_lease;
  struct kv {
    std::string key, value;
    std::int64_t create_revision = 0, mod_revision = 0, lease = 0;
  };
  std::string location_text() const { return client_.location().text; }
  std::string key(const std::string& name) const { return prefix_ + "/" + name; }
  std::vector<kv> range(const std::string& key, const std::string& range_end = "",
                        std::int64_t limit = 0, bool descending = false) const;
  std::optional<kv> get(const std::string& key) const;
  std::vector<kv> range_prefix(const std::string& prefix) const;
  // Runs a txn; returns its answer (with "succeeded" true or absent).
  nlohmann::json txn(const nlohmann::json& compare, const nlohmann::json& success) const;
  nlohmann::json fence(std::int64_t epoch) const;
  // After a failed txn: throws not_found (no such job, when `job_id` is given), fenced or
  // invalid for the epoch; returns when neither explains the failure.
  void explain_failure(std::int64_t epoch, const std::string& job_id) const;
  void require_job_compare(nlohmann::json& compare, const std::string& job_id) const;
  // Throws store_error invalid for a spec that is not a JSON object or is over the record cap.
  void require_spec(const std::string& spec_json) const;
  // Takes the next job id from the counter (see the token above), storing *spec_json under it in
  // the same txn when given.
  std::string take_job_id(std::int64_t epoch, const std::string* spec_json);
  std::int64_t last_seq(const std::string& dir) const;
  // Appends records under `dir`/<seq> (seq from `next`), trimming to `kept`.
  void append_sequenced(std::int64_t epoch, const std::string& job_id, const std::string& dir,
                        std::map<std::string, std::int64_t>& next, std::int64_t kept,
                        std::vector<nlohmann::json> records, bool stamp_seq);

  mutable etcd_client client_;
  std::string prefix_;
  store_options options_;
  clock_ms now_;
  etcd_lease lease_;
  std::map<std::string, std::int64_t> last_event_seq_, last_log_seq_;  // per job, read once
};

}  // namespace cohort::core::store

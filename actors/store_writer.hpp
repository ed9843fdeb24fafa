// The head's store writer: a detached actor (a thread of its own) that does the head's store I/O
// while it leads, so the head actor's handlers on the shared scheduler never wait on the disk:
// job ids taken ahead of submits and the specs accepted under them, job records and their history
// lines (state.json, events.jsonl, fsync'd), worker output (logs.jsonl, every line a worker
// prints) and reading that output back for `submit logs`. It owns its own
// core::store::cluster_store on the head's store directory (one owner per object) and does the
// work in the order the head sent it; so a read follows every write sent before it. Each write
// carries the epoch the head stamped when it still led; the store refuses a stale one (fenced) and
// the reply says so, and the head then steps down. The head spawns it linked: they end together.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

#include "actors/leader_session.hpp"
#include "actors/messages.hpp"
#include "core/store/cluster_store.hpp"

namespace cohort::actors {

// head → writer: replace the job's state.json with `record` (its JSON view) and append a history
// line (state, reason, attempts). Reply: store_write_result.
struct store_job_state {
  std::int64_t epoch = 0;
  job_record record;
};
// head → writer: take the next job id for a job to come (core::store reserve_job_id), so that a
// submit takes it without waiting for the store. Reply: store_reserved_id.
struct store_reserve_job_id {
  std::int64_t epoch = 0;
};

// head → writer: store the spec of a job accepted under a reserved id (create_reserved_job).
// Reply: store_write_result.
struct store_job_spec {
  std::int64_t epoch = 0;
  std::string job_id;
  std::string spec_json;  // as submitted
};

// head → writer: append worker output lines of one job, each as its JSON view (with its trainer's
// attempt and number, which log_sequence restores from). Reply: store_write_result.
struct store_log_lines {
  std::int64_t epoch = 0;
  std::string job_id;
  std::vector<log_line> lines;
};
// head → writer: the job's stored output, after every write sent before. Reply: job_logs, or an
// error naming what could not be read.
struct read_job_logs {
  std::string job_id;
};
// head → writer: answered (with an empty store_write_result) once every write sent before it was
// made or refused.
struct store_barrier {};
struct store_write_result {
  std::string error;   // "" when written
  bool fenced = false;  // refused: a newer epoch leads the store
};

struct store_reserved_id {
  std::string job_id;  // "" when none was taken: see result
  store_write_result result;
};

// lease keeper → head: one renewal of the leader lease, started at `started_ns` (steady clock,
// since its epoch): renewed; or not, because another epoch leads (error empty) or the store did
// not answer (error says why; the lease held may still be good).
struct lease_renewal {
  std::int64_t started_ns = 0;
  bool renewed = false;
  std::string error;
};

// In-process messages only (never on the wire): field lists for CAF.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_job_state& x) {
  return f(caf::meta::type_name("store_job_state"), x.epoch, x.record);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_reserve_job_id& x) {
  return f(caf::meta::type_name("store_reserve_job_id"), x.epoch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_job_spec& x) {
  return f(caf::meta::type_name("store_job_spec"), x.epoch, x.job_id, x.spec_json);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_reserved_id& x) {
  return f(caf::meta::type_name("store_reserved_id"), x.job_id, x.result);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, lease_renewal& x) {
  return f(caf::meta::type_name("lease_renewal"), x.started_ns, x.renewed, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_log_lines& x) {
  return f(caf::meta::type_name("store_log_lines"), x.epoch, x.job_id, x.lines);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, read_job_logs& x) {
  return f(caf::meta::type_name("read_job_logs"), x.job_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_barrier&) {
  return f(caf::meta::type_name("store_barrier"));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_write_result& x) {
  return f(caf::meta::type_name("store_write_result"), x.error, x.fenced);
}

// The writer, on a store opened like `like` (same directory, options and clock).
caf::behavior store_writer(caf::event_based_actor* self,
                           std::shared_ptr<const core::store::cluster_store> like);

// The lease keeper: a detached actor of its own (spawned linked by the head, beside the writer)
// that renews the leader lease of `epoch` every third of `ttl`, on a store opened like `like`,
// and tells `head` each outcome (lease_renewal). The renewal's write never waits in the head's
// handlers, nor behind the writer's queue of job writes. It is the record's only writer while the
// head leads: publish_address (forwarded by the head) renews at once naming the new address, and
// every renewal after names it too.
// `fence` (may be null) is shared with the code that gives the lease back; once it is given back
// every renewal reports renewed = false without writing.
caf::behavior lease_keeper(caf::event_based_actor* self,
                           std::shared_ptr<const core::store::cluster_store> like, caf::actor head,
                           std::int64_t epoch, std::chrono::milliseconds ttl,
                           std::shared_ptr<lease_fence> fence);

// The JSON object a worker output line is stored as: its JSON view (net/json_inspector.hpp), read
// back by read_job_logs and restored from by log_sequence.
nlohmann::json stored_log_line(const log_line& line);

}  // namespace cohort::actors

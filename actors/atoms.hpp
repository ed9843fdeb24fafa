// The CAF atoms of cohort's actor protocol, and what each message carries. One place to read
// the whole in-process protocol:
//   node → head     (register_atom, node_info)                         → ok
//   client → head   (submit_atom, spec_json) → job_id | (status_atom, id) → job_record
//                   (list_atom) → vector<job_record> | (stop_atom, id) → job_record
//                   (follow_atom, id) → job_record, then (event_atom, job_event)… to the client
//                   (logs_atom, id) → vector<log_line>
//   head → node     (spawn_trainer_atom, trainer_setup, vector<actor> rank_nodes) → actor
//   trainer → node  (spawn_worker_atom, worker_setup, actor trainer) → actor
//   worker → trainer (progress_atom, progress_report) (log_atom, log_line)
//                   (done_atom, rank) (failed_atom, rank, reason)
//   trainer → head  (running_atom, job_id, attempt) (progress_atom, progress_report)
//                   (log_atom, log_line) (outcome_atom, attempt_outcome)
//   drills          (kill_worker_atom, job_id, rank) → bool, sent to a node
#pragma once

#include <caf/atom.hpp>

namespace cohort::actors {

using register_atom = caf::atom_constant<caf::atom("register")>;
using submit_atom = caf::atom_constant<caf::atom("submit")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using list_atom = caf::atom_constant<caf::atom("list")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using follow_atom = caf::atom_constant<caf::atom("follow")>;
using event_atom = caf::atom_constant<caf::atom("event")>;
using logs_atom = caf::atom_constant<caf::atom("logs")>;
using spawn_trainer_atom = caf::atom_constant<caf::atom("spawn_tr")>;
using spawn_worker_atom = caf::atom_constant<caf::atom("spawn_wk")>;
using progress_atom = caf::atom_constant<caf::atom("progress")>;
using log_atom = caf::atom_constant<caf::atom("log")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using failed_atom = caf::atom_constant<caf::atom("failed")>;
using running_atom = caf::atom_constant<caf::atom("running")>;
using outcome_atom = caf::atom_constant<caf::atom("outcome")>;
using kill_worker_atom = caf::atom_constant<caf::atom("kill_wk")>;

}  // namespace cohort::actors

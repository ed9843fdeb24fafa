// What the head shows a Prometheus scraper: an in-process query of the head actor (the metrics
// server's thread → head, never on the wire) and the text exposition format (version 0.0.4) of
// its answer. Families follow Ray's naming under `cohort_`: nodes and their resources, jobs by
// state, per-job attempts/failures/preemptions, and per-job training gauges from the newest
// progress report of the current attempt (step, loss, lr, grad_norm, tokens/s, MFU, checkpoint).
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actors/messages.hpp"

namespace cohort::actors {

// metrics server → head actor. Reply: metrics_snapshot.
struct metrics_query {};

struct metrics_snapshot {
  std::int64_t epoch = 0;                             // the leader's lease epoch
  job_list list;                                      // every job and registered node
  std::map<std::string, progress_report> progress;    // by job id: the newest report taken
};

// The snapshot in Prometheus' text format: `# HELP` and `# TYPE` lines, then samples with
// label values escaped (\\, \", \n). Every job state has a cohort_jobs sample, 0 included.
std::string prometheus_text(const metrics_snapshot& s);

}  // namespace cohort::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::metrics_query)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::metrics_snapshot)

// What the head shows a Prometheus scraper and the dashboard: in-process queries of the head
// actor (the dashboard server's threads → head, never on the wire), the per-job history of logged
// steps the charts draw, and the text exposition format (version 0.0.4) of a snapshot. Families
// follow Ray's naming under `cohort_`: nodes and their resources, jobs by state, per-job
// attempts/failures/preemptions, and per-job training gauges from the newest logged step of the
// current attempt (loss, lr, grad_norm, tokens/s, MFU), the last point of its history.
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
  std::map<std::string, progress_report> progress;    // by job id: its history's last point
};

// dashboard → head actor: the logged steps of one job's run so far. Reply: job_history, or an
// error for an unknown job.
struct job_history_query {
  std::string job_id;
};
struct job_history {
  std::vector<progress_report> points;  // ascending steps, one per logged step
};

// How many points a job's history keeps at most: past it, every second point goes (the chart
// keeps its shape over a long run at half the resolution).
constexpr std::size_t max_history_points = 4096;

// Adds a report to a job's history (the head actor's bookkeeping, one vector per job). A report
// for the last point's step replaces it (a hold reports its step again); one for an earlier step
// (an attempt resumed from an older checkpoint) first drops the points from that step on, so the
// history is the run as it now stands. Reports of step 0 or of a held rank (held_before_step > 0)
// add nothing.
void add_history_point(std::vector<progress_report>& points, const progress_report& report);

// The snapshot in Prometheus' text format: `# HELP` and `# TYPE` lines, then samples with
// label values escaped (\\, \", \n). Every job state has a cohort_jobs sample, 0 included.
std::string prometheus_text(const metrics_snapshot& s);

}  // namespace cohort::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::metrics_query)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::metrics_snapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::job_history_query)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::job_history)

// What the head passes on of its jobs: the clients following a job (`submit logs --follow`,
// `submit run`), the lines and state changes they are sent, the output an embedded head keeps in
// memory (a ring per job; a head with a store keeps it there), each job's logged steps for the
// dashboard and the metrics, and which output lines of the running attempts are stored already
// (log_sequence). Plain and single-threaded (the head actor owns it): each call returns what to
// send to whom, and the head sends it. `Follower` is caf::actor in the head, a plain value in
// tests.
//
// A follower whose stored lines are being read (follow_logs with a store) is catching up: the
// events meanwhile are held for it and handed back by end_catch_up, so that none is lost or
// repeated; it follows from then on unless the job ended meanwhile.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "actors/head_metrics.hpp"
#include "actors/log_sequence.hpp"
#include "actors/messages.hpp"

namespace cohort::actors {

// How many lines of worker output an embedded head (no store) keeps per job for `submit logs`.
constexpr std::size_t max_log_lines_per_job = 10000;

template <class Follower>
class output_hub {
 public:
  using sends = std::vector<std::pair<Follower, job_event>>;

  // `who` follows the job's events from now on.
  void follow(const std::string& job_id, const Follower& who) { followers_[job_id].push_back(who); }

  // An event of the job (`record` as it is now; `line` "" for a progress update): to every
  // follower, and held for every follower catching up. A job that ended has no followers left.
  sends publish(const job_record& record, const std::string& line) {
    sends out;
    if (auto c = catching_up_.find(record.id); c != catching_up_.end())
      for (auto& f : c->second) f.held.push_back(job_event{record, line});
    auto it = followers_.find(record.id);
    if (it == followers_.end()) return out;
    for (const auto& f : it->second) out.emplace_back(f, job_event{record, line});
    if (is_terminal(record.state)) followers_.erase(it);
    return out;
  }

  // `who` waits for the job's stored lines; the events until end_catch_up are held for it.
  void begin_catch_up(const std::string& job_id, const Follower& who) {
    catching_up_[job_id].push_back({who, {}});
  }
  // The stored lines reached `who`: the events held for it meanwhile, in order (sent next), and
  // it follows the job when `still_running`.
  std::vector<job_event> end_catch_up(const std::string& job_id, const Follower& who, bool still_running) {
    auto held = drop_catch_up(job_id, who);
    if (still_running) follow(job_id, who);
    return held;
  }
  // The stored lines could not be read: `who` neither catches up nor follows.
  std::vector<job_event> drop_catch_up(const std::string& job_id, const Follower& who) {
    std::vector<job_event> held;
    auto all = catching_up_.find(job_id);
    if (all == catching_up_.end()) return held;
    for (auto f = all->second.begin(); f != all->second.end(); ++f)
      if (f->who == who) {
        held = std::move(f->held);
        all->second.erase(f);
        break;
      }
    if (all->second.empty()) catching_up_.erase(all);
    return held;
  }

  // Without a store: the job's output kept in memory, the newest max_log_lines_per_job lines.
  void keep_in_memory(const log_line& line) {
    auto& lines = memory_[line.job_id];
    if (lines.size() >= max_log_lines_per_job) lines.pop_front();
    lines.push_back(line);
  }
  std::vector<log_line> memory_lines(const std::string& job_id) const {
    auto it = memory_.find(job_id);
    if (it == memory_.end()) return {};
    return {it->second.begin(), it->second.end()};
  }

  // Rank 0's report of the job's current attempt, kept for the charts (add_history_point).
  void add_progress(const progress_report& report) { add_history_point(progress_[report.job_id], report); }
  // Each job's logged steps, by job id.
  const std::map<std::string, std::vector<progress_report>>& progress() const { return progress_; }

  // Which lines of the running attempts are stored (sent again after a failover: stored once).
  log_sequence& stored_lines() { return stored_; }

 private:
  struct catching_up_follower {
    Follower who;
    std::vector<job_event> held;
  };
  std::map<std::string, std::vector<Follower>> followers_;
  std::map<std::string, std::vector<catching_up_follower>> catching_up_;
  std::map<std::string, std::deque<log_line>> memory_;
  std::map<std::string, std::vector<progress_report>> progress_;
  log_sequence stored_;
};

}  // namespace cohort::actors

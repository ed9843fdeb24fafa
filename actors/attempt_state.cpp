// The trainer's attempt protocol as plain state: each event returns what to send.
#include "actors/attempt_state.hpp"

#include <iostream>

#include "core/proc/line_output.hpp"

namespace cohort::actors {

attempt_state::attempt_state(trainer_setup setup, std::shared_ptr<epoch_fence> fence, double now_s)
    : setup_(std::move(setup)),
      fence_(std::move(fence)),
      hang_(setup_.rank_nodes,
            hang_limits{setup_.spec.run.failure.hang_timeout_s, setup_.spec.run.failure.startup_timeout_s,
                        setup_.spec.run.failure.checkpoint_timeout_s},
            now_s),
      started_(setup_.rank_nodes.size(), false),
      pids_(setup_.rank_nodes.size(), 0) {}

double attempt_state::hang_check_every_s() const {
  return heartbeat_interval_s(setup_.spec.run.failure.hang_timeout_s);
}

std::string attempt_state::node_of(std::int32_t rank) const {
  return rank >= 0 && rank < world() ? setup_.rank_nodes[static_cast<std::size_t>(rank)] : "";
}

log_line attempt_state::trainer_line(const std::string& text) const {
  return log_line{setup_.job_id, -1, setup_.trainer_node, 0, "trainer: " + text};
}

bool attempt_state::admitted(std::int64_t epoch, const char* command, attempt_actions& out) {
  if (!fence_) return true;
  const auto refused = fence_->refuse(epoch, std::string(command) + " of job " + setup_.job_id + " attempt " +
                                                 std::to_string(setup_.attempt + 1));
  if (!refused) return true;
  core::proc::say_whole_line(std::cerr, "trainer: " + *refused);
  out.to_head.push_back(trainer_line(*refused));
  return false;
}

void attempt_state::settle(bool succeeded, failure_cause cause, attempt_actions& out) {
  if (settled_) return;
  settled_ = true;
  out.settled = true;
  for (std::int32_t r = 0; r < world(); ++r)
    if (started_[static_cast<std::size_t>(r)])
      out.to_workers.emplace_back(r, stop_attempt{setup_.job_id, setup_.attempt, "the attempt ended"});
  cause.attempt = setup_.attempt;
  outcome_ = attempt_outcome{setup_.job_id, setup_.attempt, succeeded, cause};
  out.to_head.push_back(*outcome_);
}

void attempt_state::fail_rank(std::int32_t rank, const std::string& reason, failure_kind kind,
                              attempt_actions& out) {
  settle(false, failure_cause{0, rank, node_of(rank), reason, kind}, out);
}

void attempt_state::fail_hung(const hang_verdict& v, attempt_actions& out) {
  if (settled_) return;
  if (started_[static_cast<std::size_t>(v.rank)])
    out.to_workers.emplace_back(v.rank, kill_hung_worker{setup_.job_id, setup_.attempt, v.rank});
  out.to_head.push_back(trainer_line(v.reason + "; killing its process " + std::to_string(v.pid) +
                                     " (SIGKILL) and ending attempt " + std::to_string(setup_.attempt + 1)));
  failure_cause cause{0, v.rank, v.node, v.reason, failure_kind::retryable};
  cause.hung = true;
  cause.pid = v.pid;
  cause.last_step = v.last_step;
  settle(false, cause, out);
}

void attempt_state::forward(log_line line, attempt_actions& out) {
  line.attempt = setup_.attempt;
  line.seq = ++next_log_seq_;
  unacked_log_bytes_ += line.text.size();
  unacked_logs_.push_back(line);
  while (unacked_log_bytes_ > max_unacked_log_bytes && unacked_logs_.size() > 1) {
    unacked_log_bytes_ -= unacked_logs_.front().text.size();
    unacked_logs_.pop_front();
    ++dropped_logs_;
  }
  line.kept_from = unacked_logs_.front().seq;
  out.to_head.push_back(std::move(line));
}

void attempt_state::tell_workers(worker_command_kind kind, std::int64_t n, attempt_actions& out) const {
  for (std::int32_t r = 0; r < world(); ++r)
    if (started_[static_cast<std::size_t>(r)])
      out.to_workers.emplace_back(
          r, worker_command{setup_.job_id, setup_.attempt, kind, n,
                            kind == worker_command_kind::preempt ? preempt_deadline_ms_ : 0});
}

attempt_actions attempt_state::on_start_failed(std::int32_t rank, const std::string& reason) {
  attempt_actions out;
  settle(false, failure_cause{0, rank, rank < 0 ? setup_.trainer_node : node_of(rank), reason}, out);
  return out;
}

attempt_actions attempt_state::on_worker_started(std::int32_t rank, std::int64_t pid) {
  attempt_actions out;
  if (rank < 0 || rank >= world()) return out;
  const auto r = static_cast<std::size_t>(rank);
  if (!started_[r]) ++started_count_;
  started_[r] = true;
  pids_[r] = pid;
  hang_.on_started(rank, pid);
  // What the others were told so far.
  if (releases_ > 0)
    out.to_workers.emplace_back(
        rank, worker_command{setup_.job_id, setup_.attempt, worker_command_kind::release, releases_});
  if (checkpoint_requests_ > 0)
    out.to_workers.emplace_back(
        rank, worker_command{setup_.job_id, setup_.attempt,
                             preempted_ ? worker_command_kind::preempt : worker_command_kind::checkpoint,
                             checkpoint_requests_, preempted_ ? preempt_deadline_ms_ : 0});
  if (started_count_ == world()) out.to_head.push_back(attempt_running{setup_.job_id, setup_.attempt});
  return out;
}

attempt_actions attempt_state::on_progress(const progress_report& report, double now_s) {
  attempt_actions out;
  if (report.job_id != setup_.job_id) return out;
  hang_.on_progress(report.rank, report.step, now_s);
  if (report.rank != 0) return out;
  if (report.held_before_step > 0) hang_.hold();
  if (report.held_before_step == 0 && last_report_ && last_report_->held_before_step > 0)
    hang_.release(now_s);
  last_report_ = report;
  last_report_->attempt = setup_.attempt;  // the head counts only its current attempt's
  last_report_->activity = hang_.activity();
  out.to_head.push_back(*last_report_);
  return out;
}

void attempt_state::on_heartbeat(const rank_heartbeat& hb, double now_s) {
  if (!mine(hb.job_id, hb.attempt)) return;
  hang_.on_heartbeat(hb.rank, hb.step,
                     hb.collective_wait_s >= 0 ? std::optional<double>(hb.collective_wait_s) : std::nullopt,
                     now_s, reading_of(hb.activity));
}

attempt_actions attempt_state::on_hang_check(double now_s, bool& again) {
  attempt_actions out;
  again = false;
  if (settled_) return out;
  if (auto verdict = hang_.check(now_s)) {
    fail_hung(*verdict, out);
    return out;
  }
  // What the ranks do besides their steps: ranks past the step allowance in a save or export go
  // to the job's log (once each), and a change of the activity goes to the head with rank 0's
  // newest report (`submit status` shows it).
  for (const auto& line : hang_.long_phases(now_s))
    forward(log_line{setup_.job_id, -1, setup_.trainer_node, 0, "trainer: " + line}, out);
  auto activity = hang_.activity();
  if (last_report_ && activity != last_report_->activity) {
    last_report_->activity = std::move(activity);
    out.to_head.push_back(*last_report_);
  }
  again = true;
  return out;
}

attempt_actions attempt_state::on_log(log_line line) {
  attempt_actions out;
  forward(std::move(line), out);
  return out;
}

attempt_actions attempt_state::on_worker_finished(const worker_finished& wf, double now_s) {
  attempt_actions out;
  if (!mine(wf.job_id, wf.attempt)) return out;
  if (wf.ok) {
    hang_.on_finished(wf.rank);
    done_.insert(wf.rank);
    if (static_cast<std::int32_t>(done_.size()) == world()) settle(true, {}, out);
    return out;
  }
  // A rank whose collective timed out waiting on a silent peer does not take the blame.
  if (wf.kind == failure_kind::retryable)
    if (auto peer = hang_.silent_peer(wf.rank, now_s)) {
      fail_hung(*peer, out);
      return out;
    }
  failure_cause cause{0, wf.rank, node_of(wf.rank), wf.reason, wf.kind};
  cause.pid = wf.rank >= 0 && wf.rank < world() ? pids_[static_cast<std::size_t>(wf.rank)] : 0;
  cause.report = wf.report;
  settle(false, cause, out);
  return out;
}

attempt_actions attempt_state::on_worker_lost(std::int32_t rank, const std::string& reason) {
  attempt_actions out;
  if (done_.count(rank) == 0) fail_rank(rank, reason, failure_kind::retryable, out);
  return out;
}

attempt_actions attempt_state::on_reintroduce() {
  attempt_actions out;
  out.to_head.push_back(trainer_started{setup_.job_id, setup_.attempt});
  if (started_count_ == world()) out.to_head.push_back(attempt_running{setup_.job_id, setup_.attempt});
  // A restarted head learns the step (and a hold) without waiting for the next report.
  if (last_report_) out.to_head.push_back(*last_report_);
  // And gets the output no head acknowledged: lines written while no leader was reachable (or
  // sent to one that died before storing them). The head stores each seq once.
  if (dropped_logs_ > 0) {
    out.to_head.push_back(
        trainer_line(std::to_string(dropped_logs_) +
                     " lines of output were dropped while no head acknowledged them (kept at most " +
                     std::to_string(max_unacked_log_bytes >> 20) + " MiB)"));
    dropped_logs_ = 0;
  }
  for (auto line : unacked_logs_) {
    line.kept_from = unacked_logs_.front().seq;
    out.to_head.push_back(std::move(line));
  }
  if (outcome_) out.to_head.push_back(*outcome_);
  return out;
}

attempt_actions attempt_state::on_outcome_ack(const outcome_ack& ack) {
  attempt_actions out;
  if (mine(ack.job_id, ack.attempt) && outcome_ && admitted(ack.epoch, "outcome_ack", out)) out.quit = true;
  return out;
}

attempt_actions attempt_state::on_log_ack(const log_ack& ack) {
  attempt_actions out;
  if (!mine(ack.job_id, ack.attempt) || !admitted(ack.epoch, "log_ack", out)) return out;
  while (!unacked_logs_.empty() && unacked_logs_.front().seq <= ack.seq) {
    unacked_log_bytes_ -= unacked_logs_.front().text.size();
    unacked_logs_.pop_front();
  }
  return out;
}

attempt_actions attempt_state::on_checkpoint(const checkpoint_attempt& req) {
  attempt_actions out;
  if (!mine(req.job_id, req.attempt) || !admitted(req.epoch, "checkpoint_attempt", out)) return out;
  // Rank 0 takes it before its next step (a preempted attempt's workers keep their mark).
  tell_workers(preempted_ ? worker_command_kind::preempt : worker_command_kind::checkpoint,
               ++checkpoint_requests_, out);
  return out;
}

attempt_actions attempt_state::on_preempt(const preempt_attempt& req) {
  attempt_actions out;
  if (!mine(req.job_id, req.attempt) || !admitted(req.epoch, "preempt_attempt", out)) return out;
  // One command: the worker marks the preemption before it counts the request that comes with
  // it, so rank 0 that takes the request sees the mark.
  preempted_ = true;
  preempt_deadline_ms_ = req.deadline_ms;
  tell_workers(worker_command_kind::preempt, ++checkpoint_requests_, out);
  return out;
}

attempt_actions attempt_state::on_release(const release_attempt& req) {
  attempt_actions out;
  if (!mine(req.job_id, req.attempt) || !admitted(req.epoch, "release_attempt", out)) return out;
  tell_workers(worker_command_kind::release, ++releases_, out);  // one hold each
  forward(log_line{req.job_id, -1, setup_.trainer_node, 0,
                   "trainer: released attempt " + std::to_string(req.attempt + 1) +
                       " at the request of the head of epoch " + std::to_string(req.epoch)},
          out);
  return out;
}

attempt_actions attempt_state::on_stop(const stop_attempt& req) {
  attempt_actions out;
  if (!mine(req.job_id, req.attempt) || !admitted(req.epoch, "stop_attempt", out)) return out;
  settled_ = true;  // the head asked: no outcome to report
  out.settled = true;
  for (std::int32_t r = 0; r < world(); ++r)
    if (started_[static_cast<std::size_t>(r)]) out.to_workers.emplace_back(r, req);
  out.stopped = true;
  return out;
}

}  // namespace cohort::actors

// One attempt of one job as its trainer keeps it, without CAF: which ranks started and finished,
// the hang detector, what the workers were told, rank 0's newest report, the output and the
// outcome the head has not acknowledged. Each event of the trainer's protocol is a method that
// returns the messages to send (attempt_actions); the trainer actor (trainer_actor.cpp) only
// sends them. Workers are named by rank; the actor keeps their handles.
//
// The protocol:
// - the attempt's outcome, once settled (every rank finished, or the first failure), is kept and
//   sent again to every head that reintroduces itself until one acknowledges it (outcome_ack),
//   so an attempt that ends while no leader is reachable is not taken for lost;
// - each output line is numbered and kept until a head acknowledges it (log_ack), at most
//   max_unacked_log_bytes of text (the oldest dropped and counted, the count told to the next
//   head); a reintroduced head gets every kept line again. A line lost on a link that went down
//   while a later one got through is sent again then too: a head acknowledges a number only
//   when every line up to it is stored (log_sequence.hpp), and each line names the oldest one
//   kept (log_line::kept_from), so a dropped line is not waited for;
// - a worker that starts after commands were sent is told their totals (releases, checkpoint
//   requests, and whether the attempt is preempted) when it starts;
// - head commands (checkpoint, preempt, release, stop, and the acks) of an older epoch than the
//   node has seen are refused and logged (epoch_fence);
// - a rank found hung is killed and blamed; a rank whose collective failed while a peer went
//   silent does not take the blame, the silent peer does.
// Times are seconds on a monotonic clock, given by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "actors/epoch_fence.hpp"
#include "actors/hang_detector.hpp"
#include "actors/messages.hpp"

namespace cohort::actors {

// What a trainer keeps of its attempt's unacknowledged output.
constexpr std::size_t max_unacked_log_bytes = 4u << 20;

using head_message =
    std::variant<trainer_started, attempt_running, progress_report, log_line, attempt_outcome>;
using worker_message = std::variant<worker_command, stop_attempt, kill_hung_worker>;

struct attempt_actions {
  std::vector<head_message> to_head;                                // in order
  std::vector<std::pair<std::int32_t, worker_message>> to_workers;  // (rank, message), in order
  bool settled = false;  // the attempt just ended: the actor adds its store's refusal totals
  bool quit = false;     // the trainer's work is done (its outcome acknowledged)
  bool stopped = false;  // the head stopped the attempt: quit as shut down
};

class attempt_state {
 public:
  // `fence` (optional): the node's; commands of older epochs are refused.
  attempt_state(trainer_setup setup, std::shared_ptr<epoch_fence> fence, double now_s);

  const trainer_setup& setup() const { return setup_; }
  std::int32_t world() const { return static_cast<std::int32_t>(setup_.rank_nodes.size()); }
  bool mine(const std::string& job_id, std::int32_t attempt) const {
    return job_id == setup_.job_id && attempt == setup_.attempt;
  }
  bool settled() const { return settled_; }
  // How often the actor should call on_hang_check (the heartbeat interval of the hang timeout).
  double hang_check_every_s() const;

  // The attempt could not start (its rendezvous store, an unreachable node): it fails, blaming
  // `rank` (-1: the trainer's node).
  attempt_actions on_start_failed(std::int32_t rank, const std::string& reason);
  // Rank `rank` (0 <= rank < world()) of this attempt is up (its process `pid`): it is told what
  // the others were told.
  attempt_actions on_worker_started(std::int32_t rank, std::int64_t pid);
  attempt_actions on_progress(const progress_report& report, double now_s);
  void on_heartbeat(const rank_heartbeat& hb, double now_s);
  // Judges the ranks; `again` says whether to check again later.
  attempt_actions on_hang_check(double now_s, bool& again);
  attempt_actions on_log(log_line line);
  attempt_actions on_worker_finished(const worker_finished& wf, double now_s);
  // Rank `rank`'s worker ended without reporting how its run ended (`reason`: why, as CAF said).
  attempt_actions on_worker_lost(std::int32_t rank, const std::string& reason);
  attempt_actions on_reintroduce();
  attempt_actions on_outcome_ack(const outcome_ack& ack);
  attempt_actions on_log_ack(const log_ack& ack);
  attempt_actions on_checkpoint(const checkpoint_attempt& req);
  attempt_actions on_preempt(const preempt_attempt& req);
  attempt_actions on_release(const release_attempt& req);
  attempt_actions on_stop(const stop_attempt& req);

  // The state the tests read.
  std::size_t unacked_lines() const { return unacked_logs_.size(); }
  bool has_outcome() const { return outcome_.has_value(); }

 private:
  bool admitted(std::int64_t epoch, const char* command, attempt_actions& out);
  void settle(bool succeeded, failure_cause cause, attempt_actions& out);
  void fail_rank(std::int32_t rank, const std::string& reason, failure_kind kind, attempt_actions& out);
  void fail_hung(const hang_verdict& v, attempt_actions& out);
  void forward(log_line line, attempt_actions& out);
  void tell_workers(worker_command_kind kind, std::int64_t n, attempt_actions& out) const;
  log_line trainer_line(const std::string& text) const;
  std::string node_of(std::int32_t rank) const;

  trainer_setup setup_;
  std::shared_ptr<epoch_fence> fence_;
  hang_detector hang_;
  std::vector<bool> started_;  // by rank
  std::vector<std::int64_t> pids_;
  std::int32_t started_count_ = 0;
  std::set<std::int32_t> done_;
  bool settled_ = false;
  std::optional<progress_report> last_report_;  // rank 0's newest, told again to a restarted head
  // What the workers were told so far (worker_command totals).
  std::int64_t checkpoint_requests_ = 0;
  std::int64_t releases_ = 0;
  bool preempted_ = false;
  std::int64_t preempt_deadline_ms_ = 0;  // the preemption's deadline (unix ms), for the workers
  std::deque<log_line> unacked_logs_;
  std::size_t unacked_log_bytes_ = 0;
  std::uint64_t next_log_seq_ = 0;
  std::uint64_t dropped_logs_ = 0;  // not yet told
  std::optional<attempt_outcome> outcome_;
};

}  // namespace cohort::actors

// The registry of wire messages (see wire_protocol.hpp).
#include "actors/wire_protocol.hpp"

#include "actors/client_protocol.hpp"
#include "actors/drill_messages.hpp"
#include "actors/messages.hpp"
#include "net/bridge_messages.hpp"

namespace cohort::actors {

namespace {

using types = net::wire_types<
      failure_cause, job_record, node_info, trainer_setup, worker_setup, progress_report,
      attempt_outcome, log_line, job_event, submit_job, job_accepted, job_query, job_list_query,
      job_list, stop_job, follow_job, logs_query, job_logs, follow_logs, followed_logs, node_hello, start_trainer,
      trainer_started, start_worker, worker_started, worker_finished, attempt_running,
      stop_attempt, checkpoint_job, checkpoint_attempt, release_job, release_attempt, log_ack, outcome_ack, rank_heartbeat, kill_hung_worker, plan_request, memory_plan_item, memory_plan, plan_reply, preempt_attempt, drain_node, drain_reply, node_draining, job_ended, worker_command, net::routed, net::endpoint_down, net::process_hello,
      net::heartbeat, net::request_failed, net::not_leader, net::process_welcome, net::unknown_process>;

template <class T, class... Ts>
constexpr bool registered(net::wire_types<Ts...>) {
  return (std::is_same_v<T, Ts> || ...);
}

// Every request and reply of the client table travels on the wire.
template <class... Calls>
constexpr bool client_calls_registered(call_list<Calls...>) {
  return ((registered<typename Calls::request>(types{}) && registered<typename Calls::reply>(types{})) && ...);
}
static_assert(client_calls_registered(client_calls{}),
              "a request or reply of client_calls (client_protocol.hpp) is missing from the wire types");

// The failure drills are in-process only (drill_messages.hpp): the wire can never carry one.
static_assert(!registered<kill_worker_drill>(types{}) && !registered<kill_trainer_drill>(types{}),
              "the failure drills must not be wire messages");

// The worker process link (worker_process_link.hpp) shares worker_command with the wire: an id
// both codecs use names the same message, and what a worker process tells its node stays on the
// link.
static_assert(net::agreeing_wire_ids(types{}, worker_link_messages{}),
              "a worker link message reuses the wire id of another wire message");
static_assert(!registered<link_hello>(types{}) && !registered<process_progress>(types{}) &&
                  !registered<process_heartbeat>(types{}) && !registered<process_finished>(types{}) &&
                  !registered<process_log>(types{}),
              "what a worker process tells its node must not be a wire message");

}  // namespace

std::shared_ptr<const net::wire_codec> make_wire_codec() {
  return std::make_shared<const net::wire_codec>(types{});
}

}  // namespace cohort::actors

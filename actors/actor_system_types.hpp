// The in-process messages between cohort's actors (timers, drain notices, drills: never on the
// wire, unlike actors/messages.hpp), in one block with the declarations CAF 0.17 needs for them
// (CAF_ALLOW_UNSAFE_MESSAGE_TYPE, at global scope, seen before any use of the type in a message),
// and the text of a CAF error. Each actor's state and behavior is declared in its own header:
// head_actor.hpp, node_actor.hpp, trainer_actor.hpp, worker_actor.hpp, worker_process_actor.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <caf/all.hpp>

#include "actors/drill_messages.hpp"

namespace cohort::actors {

// A node whose link to the head came back introduces itself again (node_hello), and its
// trainers announce themselves again (trainer_started), so a restarted head adopts them.
// `epoch`: the leader that welcomed the node (0 when a trainer is told by its node).
struct reintroduce {
  std::int64_t epoch = 0;
};
// An embedded cluster's round trip to a node: answered (true) once the node has started, so
// after its node_hello went out.
struct node_ping {};
// head gateway → its head actor: the process `process` ("node:<name>" for a node) sent no
// heartbeat for the node timeout. Sent before the process's proxies end, so the head forgets a
// lost node before the downs of its trainers arrive and places no restart on it.
struct process_silent {
  std::string process;
};
// Head timer: the leader lease's time is up unless renewed since (head_actor.cpp).
struct lease_deadline {};
// Head timer: give up on restored jobs whose trainers did not return.
struct adoption_deadline {};
// Head timer: a preempted attempt's run.failure.preemption_grace_s is over; it is stopped now
// whether or not its emergency checkpoint committed.
struct preemption_deadline {
  std::string job_id;
  std::int32_t attempt = 0;
};
// Head timer: an elastic attempt below num_workers has run scaling.resize_interval_s; the head
// checks again whether it can grow.
struct resize_due {};
// cluster-worker → its node actor: the process got SIGTERM, or the cloud's preemption notice
// (cluster-worker --preemption-notice). The node tells the head (node_draining) and quits once
// its trainers and workers are gone, or at the latest after the longest
// run.failure.preemption_grace_s of its jobs plus drain_margin (from a notice: by its deadline
// plus drain_margin, when that comes first).
struct begin_drain {
  std::string reason;
  std::optional<std::chrono::system_clock::time_point> deadline{};  // a notice's: the VM goes then
};
struct drain_deadline {};
// cluster-head → its head actor: the lease names `address` from now on (the port a head asked
// for as 0 is known once it bound).
struct publish_address {
  std::string address;
};

// The text of a CAF error: its message context if it carries one, else CAF's rendering.
std::string describe(caf::actor_system& sys, const caf::error& err);

}  // namespace cohort::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::reintroduce)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::node_ping)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::process_silent)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::lease_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::adoption_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::preemption_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::resize_due)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::begin_drain)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::drain_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::publish_address)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::kill_worker_drill)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::kill_trainer_drill)

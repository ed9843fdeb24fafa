// What every workload does while it waits: notice cancellation between steps, and wait for a
// collective while aborting the group when the worker is told to stop meanwhile.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "core/comm/process_group.hpp"
#include "core/train/workload.hpp"

namespace cohort::core::train {

// Throws cancelled_error once *cancelled is set (null: never).
void check_cancelled(const std::atomic<bool>* cancelled);

// Waits for `w` within the group's timeout; when *cancelled is set first, aborts the group (so
// peers fail instead of hanging) and throws cancelled_error. A collective that fails while
// *cancelled is set (a peer stopped too and aborted it) also throws cancelled_error.
void wait_for(const std::shared_ptr<comm::work>& w, comm::process_group& group,
              const std::atomic<bool>* cancelled);

// Blocks until *cancelled is set, then throws cancelled_error (a preempted rank waiting to be
// stopped; it counts as waiting in a collective for the hang detector). When `limit` passes
// first (the head that preempted the attempt never stopped it, e.g. it was replaced meanwhile),
// throws std::runtime_error saying so, so that the attempt ends as a failure and restarts.
[[noreturn]] void wait_until_cancelled(const std::atomic<bool>* cancelled, std::chrono::milliseconds limit);

// Sleeps train.step_delay_s in small slices, checking cancellation.
void pause_between_steps(const worker_context& ctx);

// The options of the attempt's group `group` ("dp": the data-parallel one), joined through the
// trainer's store (ctx.store_address) on this rank's collective transport.
comm::group_options group_options_of(const worker_context& ctx, comm::backend_kind backend,
                                     const std::string& group = "dp", int cuda_device = -1);

// The data-parallel group of a job attempt, joined through the trainer's store (ctx.store_address).
// cuda_device: NCCL's device for this rank (-1: the current device). Throws cancelled_error when
// ctx.cancelled is set before it joins, or when the rendezvous fails while it is set.
std::unique_ptr<comm::process_group> join_group(const worker_context& ctx, comm::backend_kind backend,
                                                int cuda_device = -1);

}  // namespace cohort::core::train

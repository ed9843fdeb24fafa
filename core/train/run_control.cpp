// check_cancelled / wait_for / pause_between_steps / join_group.
#include "core/train/run_control.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/comm/collective_wait.hpp"
#include "core/comm/comm_error.hpp"
#include "core/comm/network_interfaces.hpp"
#include "core/comm/tcp_store.hpp"

namespace cohort::core::train {

void check_cancelled(const std::atomic<bool>* cancelled) {
  if (cancelled != nullptr && cancelled->load()) throw cancelled_error();
}

void wait_for(const std::shared_ptr<comm::work>& w, comm::process_group& group,
              const std::atomic<bool>* cancelled) {
  comm::collective_wait_scope waiting;  // the hang detector must not blame this rank
  // Blocked on the work (woken when it finishes), looking at the cancel flag every 20 ms: a rank
  // that waits costs no CPU its peers need to finish the collective.
  constexpr auto cancel_check = std::chrono::milliseconds(20);
  while (!w->wait_finished(cancel_check)) {
    if (cancelled != nullptr && cancelled->load()) {
      group.abort("worker rank " + std::to_string(group.rank()) + " was stopped");
      throw cancelled_error();
    }
  }
  try {
    w->wait(group.timeout());
  } catch (const comm::comm_error&) {
    check_cancelled(cancelled);  // a peer that was stopped too aborted it: the stop is the cause
    throw;
  }
}

void wait_until_cancelled(const std::atomic<bool>* cancelled, std::chrono::milliseconds limit) {
  comm::collective_wait_scope waiting;  // waiting for the head, not hung
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (cancelled == nullptr || !cancelled->load()) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("preempted: the emergency checkpoint committed but the attempt was not "
                               "stopped within " + std::to_string(limit.count() / 1000) +
                               " s (run.failure.preemption_grace_s + 60 s); ending it");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw cancelled_error();
}

void pause_between_steps(const worker_context& ctx) {
  auto left = std::chrono::duration<double>(ctx.spec.train.step_delay_s);
  while (left.count() > 0) {
    check_cancelled(ctx.cancelled);
    auto slice = std::min(left, std::chrono::duration<double>(0.01));
    std::this_thread::sleep_for(slice);
    left -= slice;
  }
}

namespace {

// This process's value of `variable` ("" when unset), and where it came from: the job's
// runtime_env (bad input when wrong) or the node (its cluster-worker's --collective-interface or
// environment).
struct interface_setting {
  std::string value;
  bool from_job = false;
  std::string where;
};

interface_setting interface_setting_of(const worker_context& ctx, const char* variable) {
  interface_setting s;
  const char* v = std::getenv(variable);
  s.value = v != nullptr ? v : "";
  s.from_job = ctx.spec.runtime_env.env_vars.count(variable) != 0;
  s.where = s.from_job ? std::string("runtime_env.env_vars.") + variable
                       : std::string(variable) +
                             " of the node (its cluster-worker's --collective-interface or environment)";
  return s;
}

// The failure of a rank whose interface setting is wrong (the rank's report names rank and node).
[[noreturn]] void refuse_interface(const interface_setting& s, const std::string& why) {
  if (s.from_job) throw bad_input_error(s.where + ": " + why);
  throw comm::comm_error(comm::comm_errc::invalid_argument, s.where + ": " + why);
}

// Where this rank's collectives listen and what its peers dial. Gloo: the interface
// GLOO_SOCKET_IFNAME names (checked: it exists, is up, has an address), else the node's address
// (cluster-worker --node-address). NCCL: NCCL_SOCKET_IFNAME as set (checked: it selects an
// interface), else NCCL's own choice.
void choose_transport(const worker_context& ctx, comm::backend_kind backend, comm::group_options& options) {
  const auto interfaces = comm::list_network_interfaces();
  if (backend == comm::backend_kind::gloo) {
    const auto gloo = interface_setting_of(ctx, "GLOO_SOCKET_IFNAME");
    if (gloo.value.empty()) {
      options.gloo_hostname = ctx.node_address;
      return;
    }
    if (const auto why = comm::check_gloo_interface(gloo.value, interfaces); !why.empty())
      refuse_interface(gloo, why);
    options.gloo_interface = gloo.value;
    return;
  }
  // NCCL reads NCCL_SOCKET_IFNAME itself; cluster-worker sets it from --node-address or
  // --collective-interface for its worker processes unless it was set.
  const auto nccl = interface_setting_of(ctx, "NCCL_SOCKET_IFNAME");
  if (!nccl.value.empty())
    if (const auto why = comm::check_nccl_socket_ifname(nccl.value, interfaces); !why.empty())
      refuse_interface(nccl, why);
}

}  // namespace

comm::group_options group_options_of(const worker_context& ctx, comm::backend_kind backend,
                                     const std::string& group, int cuda_device) {
  auto address = comm::parse_host_port(ctx.store_address);
  comm::group_options options;
  options.backend = backend;
  options.rank = ctx.rank;
  options.world_size = ctx.world_size;
  options.rendezvous = std::make_shared<comm::tcp_store>(address.host, address.port, ctx.store_secret);
  options.key_prefix = ctx.job_id + "/attempt-" + std::to_string(ctx.attempt) + "/" + group + "/";
  options.timeout = std::chrono::milliseconds(
      static_cast<std::int64_t>(ctx.spec.run.failure.collective_timeout_s * 1000));
  options.cuda_device = cuda_device;
  options.peer_secret = ctx.store_secret;  // Gloo's pairs prove they hold it
  choose_transport(ctx, backend, options);
  return options;
}

std::unique_ptr<comm::process_group> join_group(const worker_context& ctx, comm::backend_kind backend,
                                                int cuda_device) {
  const auto options = group_options_of(ctx, backend, "dp", cuda_device);
  check_cancelled(ctx.cancelled);
  try {
    return comm::make_process_group(options);
  } catch (const comm::comm_error&) {
    check_cancelled(ctx.cancelled);  // a stopped peer left the rendezvous: the stop is the cause
    throw;
  }
}

}  // namespace cohort::core::train

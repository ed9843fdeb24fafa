// cohort-worker: one worker of a job, in a process of its own, started by a cluster-worker (never
// by hand). It reads its setup from the file named by COHORT_WORKER_SETUP_FILE (removing it) or
// from COHORT_WORKER_SETUP, runs the job's workload, writes progress and its final word as
// control lines on fd 3 (a failure of the job's own input at setup as bad input), and its output
// on stdout (the job's log).
// Its first line names the GPUs it got (CUDA_VISIBLE_DEVICES, as NVML sees them) and which of the
// job's runtime_env.env_vars it has; a worker whose bundle has GPUs but that sees none fails.
// SIGTERM stops it at the next step. Exit: 0 done or stopped, 1 failed, 2 bad setup.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "actors/worker_process_link.hpp"
#include "core/resources/gpu_discovery.hpp"
#include "core/train/workload.hpp"

using namespace cohort;

namespace {

std::atomic<bool> stop_requested{false};

extern "C" void on_sigterm(int) { stop_requested.store(true); }

// One control line, written whole with one write(2).
void control(const std::string& line) {
  std::string out = line + "\n";
  const char* p = out.data();
  std::size_t left = out.size();
  while (left > 0) {
    ssize_t n = ::write(actors::worker_control_fd, p, left);
    if (n <= 0) return;  // the node is gone; nothing left to tell
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// "GPU 0 = GPU-… (NVIDIA H100 80GB HBM3, bus 00000000:19:00.0)", or why there is none.
std::string devices_text(const core::resources::gpu_discovery& found) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (found.devices.empty())
    return std::string("no GPU (CUDA_VISIBLE_DEVICES=") +
           (visible ? "\"" + std::string(visible) + "\"" : std::string("unset")) +
           (found.note.empty() ? "" : "; " + found.note) + ")";
  std::string text;
  for (std::size_t i = 0; i < found.devices.size(); ++i) {
    const auto& d = found.devices[i];
    text += (i == 0 ? "" : ", ") + std::string("GPU ") + std::to_string(i) + " = " + d.uuid + " (" +
            d.name + ", bus " + d.pci_bus_id + ")";
  }
  return text;
}

// The names of the job's runtime_env.env_vars present in this process's environment.
std::string job_env_text(const config::job_spec& spec) {
  std::string names;
  for (const auto& [name, value] : spec.runtime_env.env_vars)
    if (std::getenv(name.c_str()) != nullptr) names += (names.empty() ? "" : " ") + name;
  return names.empty() ? "none" : names;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that went away must show up as EPIPE on its connection, not end this process.
  ::signal(SIGPIPE, SIG_IGN);
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << "cohort-worker: started by cluster-worker for one rank of a job; reads its "
                 "setup from the file $" << actors::worker_setup_file_variable << " names\n";
    return 0;
  }
  actors::worker_setup setup;
  try {
    setup = actors::read_worker_setup();
  } catch (const std::exception& e) {
    std::cerr << "cohort-worker: bad setup: " << e.what() << "\n";
    return 2;
  }
  core::train::worker_context ctx;
  try {
    ctx = actors::worker_context_for(setup);
  } catch (const std::exception& e) {  // the job's spec: no restart can fix it
    std::cerr << "cohort-worker: bad job spec: " << e.what() << "\n";
    control(actors::finished_line(false, e.what(), actors::failure_kind::bad_input));
    return 2;
  }
  const auto found = core::resources::discover_gpus();
  std::cout << "cohort-worker: rank " << setup.rank << " of job " << setup.job_id << " on node "
            << setup.node << " (pid " << ::getpid() << "): " << devices_text(found)
            << "; job environment: " << job_env_text(ctx.spec) << std::endl;
  const auto gpu = ctx.spec.scaling.resources_per_worker.find("GPU");
  const double gpus = gpu == ctx.spec.scaling.resources_per_worker.end() ? 0.0 : gpu->second;
  if ((gpus > 0 || !setup.gpus.empty()) && found.devices.empty()) {
    const std::string reason = "rank " + std::to_string(setup.rank) + " on node " + setup.node +
                               ": scaling.resources_per_worker.GPU is " +
                               core::resources::format_quantity(gpus) +
                               " but this worker sees " + devices_text(found) +
                               "; check the node's NVIDIA driver and CUDA_VISIBLE_DEVICES";
    std::cerr << "cohort-worker: " << reason << std::endl;
    control(actors::finished_line(false, reason));
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  ::sigaction(SIGTERM, &sa, nullptr);

  ctx.cancelled = &stop_requested;
  ctx.report = [&](const core::train::step_report& r) {
    control(actors::progress_line(actors::progress_report{setup.job_id, setup.rank, r.step,
                                                          r.total_steps, r.loss, r.lr,
                                                          r.grad_norm, r.tokens_per_s, r.mfu,
                                                          r.checkpoint_step, r.held_before_step}));
  };
  ctx.log = [](const std::string& line) { std::cout << line << std::endl; };
  try {
    core::train::make_workload(ctx.spec)->run(ctx);
  } catch (const core::train::cancelled_error&) {
    return 0;
  } catch (const core::train::bad_input_error& e) {
    std::cerr << "worker rank " << setup.rank << " failed on the job's input: " << e.what() << std::endl;
    control(actors::finished_line(false, e.what(), actors::failure_kind::bad_input));
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "worker rank " << setup.rank << " failed: " << e.what() << std::endl;
    control(actors::finished_line(false, e.what()));
    return 1;
  }
  control(actors::finished_line(true, ""));
  return 0;
}

// cohort-worker: one worker of a job, in a process of its own, started by a cluster-worker (never
// by hand). It reads its setup from COHORT_WORKER_SETUP, runs the job's workload, writes progress
// and its final word as control lines on fd 3, and its output on stdout (the job's log).
// SIGTERM stops it at the next step. Exit: 0 done or stopped, 1 failed, 2 bad setup.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "actors/worker_process_link.hpp"
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

}  // namespace

int main(int argc, char** argv) {
  // A peer that went away must show up as EPIPE on its connection, not end this process.
  ::signal(SIGPIPE, SIG_IGN);
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << "cohort-worker: started by cluster-worker for one rank of a job; reads its "
                 "setup from $" << actors::worker_setup_variable << "\n";
    return 0;
  }
  const char* setup_text = std::getenv(actors::worker_setup_variable);
  if (setup_text == nullptr) {
    std::cerr << "cohort-worker: $" << actors::worker_setup_variable
              << " is not set (cohort-worker is started by cluster-worker)\n";
    return 2;
  }
  actors::worker_setup setup;
  core::train::worker_context ctx;
  try {
    setup = actors::worker_setup_from_json(setup_text);
    ctx = actors::worker_context_for(setup);
  } catch (const std::exception& e) {
    std::cerr << "cohort-worker: bad setup: " << e.what() << "\n";
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  ::sigaction(SIGTERM, &sa, nullptr);

  ctx.cancelled = &stop_requested;
  ctx.report = [&](const core::train::step_report& r) {
    control(actors::progress_line(actors::progress_report{setup.job_id, setup.rank, r.step,
                                                          r.total_steps, r.loss, r.lr,
                                                          r.grad_norm, r.tokens_per_s, r.mfu,
                                                          r.checkpoint_step}));
  };
  ctx.log = [](const std::string& line) { std::cout << line << std::endl; };
  try {
    core::train::make_workload(ctx.spec)->run(ctx);
  } catch (const core::train::cancelled_error&) {
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "worker rank " << setup.rank << " failed: " << e.what() << std::endl;
    control(actors::finished_line(false, e.what()));
    return 1;
  }
  control(actors::finished_line(true, ""));
  return 0;
}

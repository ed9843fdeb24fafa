// Waiting for SIGINT/SIGTERM (see signal_wait.hpp).
#include "tools/signal_wait.hpp"

#include <signal.h>

namespace cohort::tools {

namespace {
sigset_t termination_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void block_termination_signals() {
  auto set = termination_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int wait_for_termination_signal() {
  auto set = termination_signals();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace cohort::tools

// Waiting for SIGINT/SIGTERM (see signal_wait.hpp).
#include "tools/signal_wait.hpp"

#include <errno.h>
#include <signal.h>
#include <time.h>

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

int wait_for_termination_signal_for(std::chrono::milliseconds timeout) {
  auto set = termination_signals();
  const auto ms = timeout.count() < 0 ? 0 : timeout.count();
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
  for (;;) {
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return sig;
    if (errno == EAGAIN) return 0;  // timed out
    // EINTR: another signal interrupted the wait; waiting the whole time again is harmless here.
  }
}

}  // namespace cohort::tools

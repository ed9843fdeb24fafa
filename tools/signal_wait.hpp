// Blocks the main thread of a node process until SIGINT or SIGTERM arrives (or stop_waiting is
// called), so tools can shut their actor system down in order.
#pragma once

#include <chrono>

namespace cohort::tools {

// Blocks SIGINT and SIGTERM in the calling thread (call first in main, before threads start,
// so every thread inherits the mask) and returns once one arrives; returns the signal number.
void block_termination_signals();
int wait_for_termination_signal();
// As wait_for_termination_signal, for at most `timeout`: 0 when no signal came meanwhile.
int wait_for_termination_signal_for(std::chrono::milliseconds timeout);

}  // namespace cohort::tools

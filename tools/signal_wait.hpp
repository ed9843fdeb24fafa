// Blocks the main thread of a node process until SIGINT or SIGTERM arrives (or stop_waiting is
// called), so tools can shut their actor system down in order.
#pragma once

namespace cohort::tools {

// Blocks SIGINT and SIGTERM in the calling thread (call first in main, before threads start,
// so every thread inherits the mask) and returns once one arrives; returns the signal number.
void block_termination_signals();
int wait_for_termination_signal();

}  // namespace cohort::tools

// Blocks the main thread of a node process until SIGINT or SIGTERM arrives (or stop_waiting is
// called), so tools can shut their actor system down in order; and daemon_main, the shape of a
// daemon's main around it.
#pragma once

#include <signal.h>

#include <chrono>
#include <exception>
#include <iostream>
#include <variant>

#include "core/proc/open_files.hpp"

namespace cohort::tools {

// Blocks SIGINT and SIGTERM in the calling thread (call first in main, before threads start,
// so every thread inherits the mask) and returns once one arrives; returns the signal number.
void block_termination_signals();
int wait_for_termination_signal();
// As wait_for_termination_signal, for at most `timeout`: 0 when no signal came meanwhile.
int wait_for_termination_signal_for(std::chrono::milliseconds timeout);

// A daemon's main (cluster-head, cluster-worker): SIGPIPE ignored (a peer that went away shows up
// as EPIPE on its connection, not as the end of this process), termination signals blocked before
// any thread starts, then `parse(argc, argv)` (the settings, or an exit code: help 0, bad 2), the
// open-files limit raised to the hard limit and said (its workers inherit it), then
// `run(settings)` for the exit code; an exception ends it with 1, said as "NAME: what".
template <class Parse, class Run>
int daemon_main(const char* name, int argc, char** argv, Parse parse, Run run) {
  ::signal(SIGPIPE, SIG_IGN);
  block_termination_signals();
  auto parsed = parse(argc, argv);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  std::cout << name << ": " << core::proc::describe(core::proc::raise_open_files_limit()) << std::endl;
  try {
    return run(std::get<0>(parsed));
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace cohort::tools

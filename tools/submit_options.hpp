// The command line of `submit`, shared by `submit` (the light client: no torch, no actors) and
// `cohort-local` (the embedded cluster that `submit` runs for --local and for plans over --nodes):
// one parser and one usage text, so both programs take exactly the same arguments.
#pragma once

#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <variant>

#include "config/job_spec.hpp"
#include "tools/cluster_target.hpp"

namespace cohort::tools {

// Exit codes of submit (and cohort-bench): 0 ok (a followed job SUCCEEDED), 1 job failed or cluster error, 2 usage
// or bad input.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failed = 1;
inline constexpr int exit_usage = 2;

// The cluster (address, store, credentials) and the rest of the command line.
struct submit_options : cluster_target {
  std::string command, arg, nodes;
  bool local = false, follow = false, json = false;
  double num_cpus = 0;
  std::optional<double> num_gpus;
};

// The usage text (commands), printed above the options by --help and after a usage error.
extern const char* const submit_usage;

// Parses submit's arguments (environment defaults: COHORT_ADDRESS, COHORT_CREDENTIALS). Prints
// help or the usage error itself and returns the exit code instead of options when there is
// nothing to run (--help: 0; a bad option or missing argument: 2).
std::variant<submit_options, int> parse_submit_options(int argc, char** argv);

// Whether the command runs without a cluster, in cohort-local: `run` with --local or with no
// address nor store; `plan` with --nodes.
bool runs_without_cluster(const submit_options& o);

// Runs a parsed command (`command()` returns its exit code) and turns what it throws into
// submit's exit codes, printed as "<program>: ...": a spec_error (bad input) exit_usage, any
// other error exit_failed. submit, cohort-local and cohort-bench end their main() with it.
template <class Command>
int exit_code_of(Command&& command, const char* program = "submit") {
  try {
    return command();
  } catch (const config::spec_error& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return exit_usage;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return exit_failed;
  }
}

}  // namespace cohort::tools

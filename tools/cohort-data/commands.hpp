// The cohort-data subcommands. Each takes its own arguments (after the command word), prints its
// result on stdout and returns the process exit code; usage errors throw boost::program_options
// errors and bad input throws data_error / tokenizer_error (main maps both to exit code 2).
#pragma once

#include <string>
#include <vector>

namespace cohort::tools::data {

using args = std::vector<std::string>;

int build_command(const args& a);
int inspect_command(const args& a);
int plan_command(const args& a);
int batches_command(const args& a);
int verify_command(const args& a);

}  // namespace cohort::tools::data

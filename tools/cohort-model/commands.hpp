// cohort-model's subcommands. Each takes the arguments after its name, prints its result on
// stdout and returns the exit code; it throws usage_error (exit 2) for bad options.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

namespace cohort::tools {

using arg_list = std::vector<std::string>;

class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses `args` against `desc`; prints `synopsis` and the options and returns false on --help.
// Throws usage_error for unknown, malformed or missing required options.
bool parse_options(const arg_list& args, boost::program_options::options_description& desc,
                   boost::program_options::variables_map& vm, const std::string& synopsis);

// --input-ids of eval and step.
inline constexpr const char* input_ids_help =
    "JSON file with {\"input_ids\": [[...]]}; for T5 also \"labels\": [[...]] (-100 = ignored; "
    "the decoder input is the labels shifted right) and optionally \"attention_mask\" (0/1)";

int run_eval(const arg_list& args);
int run_score(const arg_list& args);
int run_step(const arg_list& args);
int run_info(const arg_list& args);
int run_tokenize(const arg_list& args);
int run_generate(const arg_list& args);

}  // namespace cohort::tools

// The command line of cohort's programs and benchmarks (Boost.Program_options), read one way:
// --help prints the option table and ends the program with 0 (before any required option is
// missed); a bad or missing option is said as "PROGRAM: what" above the table, exit 2.
#pragma once

#include <iostream>
#include <optional>

#include <boost/program_options.hpp>

namespace cohort::tools {

// Reads argv into `vm` against `desc`: nothing when the program goes on, else its exit code.
// `help` is the table printed (`desc` when null: a program may print fewer options than it reads).
inline std::optional<int> read_command_line(
    const char* program, int argc, char** argv, const boost::program_options::options_description& desc,
    boost::program_options::variables_map& vm,
    const boost::program_options::options_description* help = nullptr) {
  namespace po = boost::program_options;
  const auto& table = help != nullptr ? *help : desc;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << table << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << program << ": " << e.what() << "\n" << table << "\n";
    return 2;
  }
  return std::nullopt;
}

}  // namespace cohort::tools

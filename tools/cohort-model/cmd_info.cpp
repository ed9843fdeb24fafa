// cohort-model info: family, parameter count and memory needs per precision, as JSON.
#include <iostream>
#include <string>

#include "core/model/runner.hpp"
#include "tools/cohort-model/commands.hpp"

namespace po = boost::program_options;

namespace cohort::tools {

int run_info(const arg_list& args) {
  std::string dir;
  po::options_description desc("info options");
  desc.add_options()("hf-dir", po::value(&dir)->required(), "Hugging Face model directory");
  po::variables_map vm;
  if (!parse_options(args, desc, vm, "cohort-model info --hf-dir DIR")) return 0;
  std::cout << core::model::describe(dir).dump(2) << std::endl;
  return 0;
}

}  // namespace cohort::tools

// cohort-model: evaluate, train one step on, generate from, or describe a Hugging Face model
// directory.
// Exit codes: 0 done, 2 usage or bad input (message on stderr), 1 any other failure.
#include <cstdio>
#include <iostream>

#include "core/model/model_error.hpp"
#include "tools/cohort-model/commands.hpp"

namespace po = boost::program_options;
using cohort::core::model::model_errc;
using cohort::core::model::model_error;

namespace cohort::tools {

bool parse_options(const arg_list& args, po::options_description& desc, po::variables_map& vm,
                   const std::string& synopsis) {
  desc.add_options()("help,h", "print this help");
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: " << synopsis << "\n\n" << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw usage_error(std::string(e.what()) + "\nusage: " + synopsis);
  }
  return true;
}

}  // namespace cohort::tools

namespace {

struct command {
  const char* name;
  int (*run)(const cohort::tools::arg_list&);
  const char* summary;
};

const command commands[] = {
    {"eval", cohort::tools::run_eval, "print loss and logits of a model on input ids (JSON)"},
    {"score", cohort::tools::run_score, "print a reward model's score of each row of input ids (JSON)"},
    {"step", cohort::tools::run_step, "take one clipped AdamW step and write the model"},
    {"info", cohort::tools::run_info, "print family, parameter count and memory needs (JSON)"},
    {"tokenize", cohort::tools::run_tokenize, "print the token ids of a text (JSON list)"},
    {"generate", cohort::tools::run_generate, "continue a prompt, greedy or sampled, with a KV cache"},
};

void usage(std::ostream& out) {
  out << "usage: cohort-model <command> [options]   (cohort-model <command> --help)\n\ncommands:\n";
  for (const auto& c : commands) out << "  " << c.name << "\t" << c.summary << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(std::cout);
    return 0;
  }
  for (const auto& c : commands) {
    if (name != c.name) continue;
    try {
      return c.run(cohort::tools::arg_list(argv + 2, argv + argc));
    } catch (const cohort::tools::usage_error& e) {
      std::cerr << "cohort-model " << name << ": " << e.what() << "\n";
      return 2;
    } catch (const model_error& e) {
      std::cerr << "cohort-model " << name << ": " << e.what() << "\n";
      return e.code() == model_errc::io ? 1 : 2;
    } catch (const std::exception& e) {
      std::cerr << "cohort-model " << name << ": failed: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "cohort-model: unknown command '" << name << "'\n";
  usage(std::cerr);
  return 2;
}

// cohort-data: build, inspect, plan, sample and verify token-shard datasets.
#include <boost/program_options/errors.hpp>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "core/data/format.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "tools/cohort-data/commands.hpp"

namespace {

constexpr const char* usage =
    "usage: cohort-data COMMAND [options]   (cohort-data COMMAND --help for its options)\n"
    "\n"
    "commands:\n"
    "  build    --input PATH --tokenizer FILE [--template T | --field NAME] [--special-tokens F]\n"
    "           --seq-len N [--pack | --pad] --out DIR      tokenize text/jsonl into token shards\n"
    "  build    --input FILE.jsonl --tokenizer FILE --template-source S --template-target T\n"
    "           --source-len N --target-len M [--over-long truncate|skip|error] --out DIR\n"
    "                                                       seq2seq (encoder/decoder) token shards\n"
    "  inspect  DIR                                         dataset summary as JSON\n"
    "  plan     DIR --world-size W --micro-batch B --grad-accum G [--epochs E]\n"
    "                                                       global batch and step counts as JSON\n"
    "  batches  DIR --world-size W --rank R --micro-batch B --grad-accum G --seed S\n"
    "           --start-step K --steps N                   one JSON line per step: a rank's samples\n"
    "  verify   DIR                                         check every shard's checksum (exit 1 if bad)\n";

}  // namespace

int main(int argc, char** argv) {
  namespace cmd = cohort::tools::data;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const cmd::args rest(argv + 2, argv + argc);
  try {
    if (command == "build") return cmd::build_command(rest);
    if (command == "inspect") return cmd::inspect_command(rest);
    if (command == "plan") return cmd::plan_command(rest);
    if (command == "batches") return cmd::batches_command(rest);
    if (command == "verify") return cmd::verify_command(rest);
    std::fprintf(stderr, "cohort-data: unknown command \"%s\"\n\n%s", command.c_str(), usage);
    return 2;
  } catch (const boost::program_options::error& e) {
    std::fprintf(stderr, "cohort-data %s: %s (see cohort-data %s --help)\n", command.c_str(), e.what(),
                 command.c_str());
    return 2;
  } catch (const cohort::core::data::data_error& e) {
    std::fprintf(stderr, "cohort-data %s: error: %s\n", command.c_str(), e.what());
    return 2;
  } catch (const cohort::core::tokenizer::tokenizer_error& e) {
    std::fprintf(stderr, "cohort-data %s: tokenizer error: %s\n", command.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-data %s: failed: %s\n", command.c_str(), e.what());
    return 1;
  }
}

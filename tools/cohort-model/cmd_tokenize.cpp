// `cohort-model tokenize`: runs cohort-tokenize, the tokenizer program installed next to this one.
// The tokenizers live in a process without libtorch: Debian's libtorch loads libprotobuf, whose
// symbols clash with the protobuf that libsentencepiece carries inside, and a process that loads
// both crashes before main().
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "tools/cohort-model/commands.hpp"

namespace cohort::tools {

int run_tokenize(const arg_list& args) {
  auto program = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "cohort-tokenize";
  std::vector<std::string> words{program.string()};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  std::cerr << "cohort-model tokenize: cannot run " << program.string() << ": "
            << std::strerror(errno) << "\n";
  return 1;
}

}  // namespace cohort::tools

// cohort-tokenize: the tokenizer half of `cohort-model tokenize` (see cmd_tokenize.cpp), kept in
// a program without libtorch. Same options: --tokenizer FILE|DIR --text STRING.
#include <string>
#include <vector>

#include "tools/cohort-model/tokenize_command.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> words{"tokenize"};
  for (int i = 1; i < argc; ++i) words.emplace_back(argv[i]);
  std::vector<char*> args;
  for (auto& w : words) args.push_back(w.data());
  return cohort::tools::run_tokenize_command(static_cast<int>(args.size()), args.data());
}

// cohort-tokenize: standalone form of `cohort-model tokenize` (same options).
#include <string>
#include <vector>

#include "tools/cohort_model_tokenize.hpp"

int main(int argc, char** argv) {
  std::string name = "tokenize";
  std::vector<char*> args{name.data()};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  return cohort::tools::run_tokenize_command(static_cast<int>(args.size()), args.data());
}

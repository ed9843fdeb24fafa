// Full integrity check of a dataset: every shard file's size and XXH64 against the manifest, index
// offsets monotone and spanning the tokens, token ids below vocab_size. Reads every byte once.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace cohort::core::data {

struct verify_problem {
  std::string file;     // the shard file (or manifest.json) at fault
  std::string message;  // what is wrong with it
};

// Returns every problem found (empty = the dataset is intact). `on_file` (optional) is called with
// each file name before it is checked, for progress output.
std::vector<verify_problem> verify_dataset(const std::string& dir,
                                           const std::function<void(const std::string&)>& on_file = {});

}  // namespace cohort::core::data

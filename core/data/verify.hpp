// Integrity checks of a dataset. verify_dataset is the full check (`cohort-data verify`): every
// shard file's size and XXH64 against the manifest, index offsets monotone and spanning the tokens,
// token ids below vocab_size. verify_checksums is the check a rank runs before training: sizes and
// XXH64 only, spread over threads. A seq2seq set's target streams are checked as its source is.
// Both read every byte once and hold no state between calls.
#pragma once

#include <cstdint>
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

struct checksum_summary {
  std::size_t files = 0;       // shard files checked (tokens, index and mask files)
  std::uint64_t bytes = 0;     // their total size
};

// Checks the size and XXH64 of every shard file listed in `dir`'s manifest, on `threads` threads
// of its own (at least 1; joined before it returns). The sampler draws every step from a
// permutation of the whole data set, so over a run any rank may read any shard: this is the
// check for all of them. Throws data_error naming the first bad file in manifest order, with the
// digest the manifest expects and the one the file has (or its size / why it cannot be read).
checksum_summary verify_checksums(const std::string& dir, int threads);

}  // namespace cohort::core::data

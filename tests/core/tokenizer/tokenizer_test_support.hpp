// Shared helpers for the tokenizer tests: the /work/shared fixtures, a scratch directory, and a
// tiny byte-level tokenizer.json builder.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cohort::test {

// $COHORT_SHARED/<relative>; fails the test when COHORT_SHARED or the file is missing.
std::string shared_file(const std::string& relative);

// A fresh empty directory under the system temp dir, removed when the object goes away.
class scratch_dir {
 public:
  scratch_dir();
  ~scratch_dir();
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  std::string path() const { return path_; }
  // Writes `content` to <dir>/<name> and returns the full path.
  std::string write(const std::string& name, const std::string& content) const;

 private:
  std::string path_;
};

// A byte-level BPE tokenizer.json: vocab = the 256 GPT-2 byte symbols (id = byte value) plus the
// results of `merges` (ids from 256 on); `pre_tokenizer` as given; ByteLevel decoder.
nlohmann::json byte_level_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges,
                                         const nlohmann::json& pre_tokenizer,
                                         const nlohmann::json& added_tokens = nlohmann::json::array());

// The GPT-2 byte symbol of `b` ("Ġ" for ' ').
std::string byte_symbol(unsigned char b);

}  // namespace cohort::test

// The read-only shared data and fixtures under $COHORT_SHARED (set by ctest): a missing variable
// or file fails the test with a message saying what is needed.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace cohort::test {

// $COHORT_SHARED/<relative>; throws when COHORT_SHARED is not set or the file is missing.
inline std::string shared_file(const std::string& relative) {
  const char* shared = std::getenv("COHORT_SHARED");
  if (shared == nullptr) throw std::runtime_error("COHORT_SHARED is not set (run the tests through ctest)");
  const std::string path = std::string(shared) + "/" + relative;
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error(path + " is missing: the shared data set is required by this test");
  }
  return path;
}

}  // namespace cohort::test

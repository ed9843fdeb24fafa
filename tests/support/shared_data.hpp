// The read-only shared data and fixtures under $COHORT_SHARED (set by ctest to ../shared beside
// the repository). The small fixtures also ship in the repository under tests/shared
// ($COHORT_SHARED_COPY, set by ctest), so a clone with nothing beside it runs their tests; the
// big data sets (the Llama 2 tokenizer model, GSM8K) do not, and the tests that need them skip
// with a message (COHORT_SKIP_WITHOUT_SHARED) when they are absent.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace cohort::test {

// $COHORT_SHARED/<relative> if present, else $COHORT_SHARED_COPY/<relative> if present, else "".
inline std::string find_shared(const std::string& relative) {
  for (const char* var : {"COHORT_SHARED", "COHORT_SHARED_COPY"}) {
    const char* root = std::getenv(var);
    if (root == nullptr) continue;
    const std::string path = std::string(root) + "/" + relative;
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

// find_shared's path; throws, saying what is needed, when there is none.
inline std::string shared_file(const std::string& relative) {
  if (std::getenv("COHORT_SHARED") == nullptr && std::getenv("COHORT_SHARED_COPY") == nullptr)
    throw std::runtime_error("COHORT_SHARED is not set (run the tests through ctest)");
  auto path = find_shared(relative);
  if (path.empty()) {
    throw std::runtime_error(relative + " is missing from the shared data set ($COHORT_SHARED) and "
                             "from the repository's copy ($COHORT_SHARED_COPY): this test needs it");
  }
  return path;
}

}  // namespace cohort::test

// In a test case (Catch2): when the shared data set's `relative` is absent, report the test as
// skipped, with a passing assertion (ctest runs with --warn NoAssertions), and return.
#define COHORT_SKIP_WITHOUT_SHARED(relative)                                                   \
  do {                                                                                         \
    if (cohort::test::find_shared(relative).empty()) {                                         \
      WARN("skipped: " << (relative) << " of the shared data set ($COHORT_SHARED) is absent"); \
      SUCCEED("skipped");                                                                      \
      return;                                                                                  \
    }                                                                                          \
  } while (false)

// Helpers for the core/model tests: fixture paths and reading JSON files. No torch.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/files.hpp"
#include "tests/support/shared_data.hpp"

namespace cohort::test {

// $COHORT_SHARED/fixtures/hf/<name>; throws (failing the test) when the data is missing.
inline std::string shared_fixture(const std::string& name) {
  shared_file("fixtures/hf/" + name + "/reference.json");  // a complete fixture has its reference
  return shared_file("fixtures/hf/" + name);
}

// tests/core/model/fixtures/<name>: references written by transformers 5.17 (see generate.py).
inline std::string local_fixture(const std::string& name) {
  return std::string(COHORT_MODEL_FIXTURES) + "/" + name;
}

inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

}  // namespace cohort::test

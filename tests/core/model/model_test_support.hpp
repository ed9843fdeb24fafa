// Helpers for the core/model tests: fixture paths, reading JSON and text files, writing files. No torch.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

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

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace cohort::test

// JSON lines (one JSON document a line): what the tools print and what runs and jobs write
// (metrics.jsonl, events.jsonl). A line that is not JSON throws, failing the test.
#pragma once

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/files.hpp"

namespace cohort::test {

// Each line of `text` parsed (an empty line is not JSON and throws too).
inline std::vector<nlohmann::json> parse_json_lines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The lines of `file` parsed; throws when the file cannot be read.
inline std::vector<nlohmann::json> read_json_lines(const std::filesystem::path& file) {
  return parse_json_lines(read_file(file));
}

}  // namespace cohort::test

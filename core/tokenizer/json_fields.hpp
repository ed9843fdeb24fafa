// Checked access to tokenizer.json fields: each helper names the file, the object and the field
// in its error, and says what type was expected.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace cohort::core::tokenizer {

std::string required_string(const nlohmann::json& obj, const char* field, const std::string& where);
const nlohmann::json& required_array(const nlohmann::json& obj, const char* field, const std::string& where);
const nlohmann::json& required_object(const nlohmann::json& obj, const char* field, const std::string& where);
bool optional_bool(const nlohmann::json& obj, const char* field, bool fallback, const std::string& where);

// A Split / Replace "pattern": {"Regex": "..."} or {"String": "..."}.
struct pattern_spec {
  std::string pattern;
  bool literal = false;
};
pattern_spec read_pattern(const nlohmann::json& obj, const std::string& where);

}  // namespace cohort::core::tokenizer

// Checked access to tokenizer.json fields (see json_fields.hpp).
#include "core/tokenizer/json_fields.hpp"

#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {
namespace {

const nlohmann::json& field_of(const nlohmann::json& obj, const char* field, const std::string& where) {
  if (!obj.is_object()) throw tokenizer_error(where + ": expected a JSON object, got " + obj.dump());
  const auto it = obj.find(field);
  if (it == obj.end()) throw tokenizer_error(where + ": required field \"" + field + "\" is missing");
  return *it;
}

}  // namespace

std::string required_string(const nlohmann::json& obj, const char* field, const std::string& where) {
  const auto& v = field_of(obj, field, where);
  if (!v.is_string()) throw tokenizer_error(where + ": field \"" + field + "\" must be a string, got " + v.dump());
  return v.get<std::string>();
}

const nlohmann::json& required_array(const nlohmann::json& obj, const char* field, const std::string& where) {
  const auto& v = field_of(obj, field, where);
  if (!v.is_array()) throw tokenizer_error(where + ": field \"" + field + "\" must be an array");
  return v;
}

const nlohmann::json& required_object(const nlohmann::json& obj, const char* field, const std::string& where) {
  const auto& v = field_of(obj, field, where);
  if (!v.is_object()) throw tokenizer_error(where + ": field \"" + field + "\" must be an object");
  return v;
}

bool optional_bool(const nlohmann::json& obj, const char* field, bool fallback, const std::string& where) {
  if (!obj.is_object()) throw tokenizer_error(where + ": expected a JSON object");
  const auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw tokenizer_error(where + ": field \"" + field + "\" must be true or false, got " + it->dump());
  return it->get<bool>();
}

pattern_spec read_pattern(const nlohmann::json& obj, const std::string& where) {
  const auto& p = required_object(obj, "pattern", where);
  if (p.contains("Regex") && p["Regex"].is_string()) return {p["Regex"].get<std::string>(), false};
  if (p.contains("String") && p["String"].is_string()) return {p["String"].get<std::string>(), true};
  throw tokenizer_error(where + ": \"pattern\" must be {\"Regex\": \"...\"} or {\"String\": \"...\"}, got " + p.dump());
}

}  // namespace cohort::core::tokenizer

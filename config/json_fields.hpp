// Path-aware reading of JSON values for the config parsers: typed conversions whose errors name the
// JSON path, the value and what is allowed, and an object reader that rejects unknown keys (with a
// "did you mean" suggestion). Used by job_spec.cpp, deepspeed_mapping.cpp and nodes_spec.cpp.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"

namespace cohort::config {

// "scaling" + "num_workers" -> "scaling.num_workers"; "" + "[1]" -> "[1]".
std::string join_path(const std::string& parent, const std::string& key);
// A short rendering of a value for error messages (long values are cut).
std::string describe(const nlohmann::json& value);
// Throws spec_error(path, "got <value>; expected <expected>").
[[noreturn]] void fail_value(const std::string& path, const nlohmann::json& value,
                             const std::string& expected);
// The known key closest to key by edit distance, or "" when none is close.
std::string closest_key(const std::string& key, const std::vector<std::string>& known);

// An inclusive/exclusive range for numbers; describe() renders "a number > 0", "... in [0, 1)".
struct number_range {
  double lo = -std::numeric_limits<double>::infinity();
  bool lo_inclusive = true;
  double hi = std::numeric_limits<double>::infinity();
  bool hi_inclusive = true;
  std::string describe() const;
  bool contains(double v) const;
};

// The ranges the spec parsers share.
inline const number_range positive{0.0, false};
inline const number_range non_negative{0.0, true};
inline const number_range unit_open{0.0, true, 1.0, false};   // [0, 1)
inline const number_range unit_closed{0.0, true, 1.0, true};  // [0, 1]

std::int64_t as_integer(const nlohmann::json& v, const std::string& path, std::int64_t lo,
                        std::int64_t hi = std::numeric_limits<std::int64_t>::max());
std::uint64_t as_unsigned(const nlohmann::json& v, const std::string& path);
double as_number(const nlohmann::json& v, const std::string& path, const number_range& range);
bool as_bool(const nlohmann::json& v, const std::string& path);
std::string as_string(const nlohmann::json& v, const std::string& path, bool allow_empty = false);
// Resource quantities: an object of name -> number >= 0, names as resource_name_rule says.
resource_quantities as_resources(const nlohmann::json& v, const std::string& path);
inline constexpr const char* resource_name_rule = "1-128 characters from [A-Za-z0-9_.:/-]";

// One of the allowed names, exactly; error lists them all.
template <class E>
E as_enum(const nlohmann::json& v, const std::string& path,
          const std::vector<std::pair<const char*, E>>& names) {
  std::string allowed;
  for (const auto& [name, value] : names) {
    if (v.is_string() && v.get<std::string>() == name) return value;
    allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  }
  fail_value(path, v, "one of " + allowed);
}

// Reads one JSON object. Every lookup registers its key as known; finish() throws for keys that
// were never looked up. When given is set, each key that is present is recorded there by full path.
class object_reader {
 public:
  object_reader(const nlohmann::json& object, std::string path,
                std::map<std::string, std::string>* given = nullptr);

  const std::string& path() const { return path_; }
  std::string child(const std::string& key) const { return join_path(path_, key); }
  // The value under key, or nullptr when absent. Registers key as known.
  const nlohmann::json* find(const std::string& key);
  // As find(), but a missing key is an error saying what is expected there.
  const nlohmann::json& require(const std::string& key, const std::string& expected);

  // Each sets out and returns true when key is present (and valid); false when absent.
  bool read(const std::string& key, int& out, std::int64_t lo,
            std::int64_t hi = std::numeric_limits<int>::max());
  bool read(const std::string& key, std::int64_t& out, std::int64_t lo);
  bool read(const std::string& key, std::uint64_t& out);
  bool read(const std::string& key, double& out, const number_range& range);
  bool read(const std::string& key, bool& out);
  bool read(const std::string& key, std::string& out, bool allow_empty = false);
  bool read(const std::string& key, resource_quantities& out);
  template <class E>
  bool read_enum(const std::string& key, E& out,
                 const std::vector<std::pair<const char*, E>>& names) {
    const nlohmann::json* v = find(key);
    if (v) out = as_enum(*v, child(key), names);
    return v != nullptr;
  }

  // Throws for the first key that no lookup registered, suggesting the closest known key.
  void finish() const;

 private:
  const nlohmann::json& object_;
  std::string path_;
  std::map<std::string, std::string>* given_;
  std::vector<std::string> known_;
};

}  // namespace cohort::config

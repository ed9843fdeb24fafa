// Path-aware reading of JSON values for the config parsers (see json_fields.hpp).
#include "config/json_fields.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

namespace cohort::config {
namespace {

std::string format_number(double v) {
  std::ostringstream out;
  out.precision(15);
  out << v;
  return out.str();
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

bool valid_resource_name(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' ||
           c == '/' || c == '-';
  });
}

}  // namespace

std::string join_path(const std::string& parent, const std::string& key) {
  if (parent.empty()) return key;
  if (!key.empty() && key[0] == '[') return parent + key;
  return parent + "." + key;
}

std::string describe(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

void fail_value(const std::string& path, const nlohmann::json& value, const std::string& expected) {
  throw spec_error(path, "got " + describe(value) + "; expected " + expected);
}

std::string closest_key(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, key.size() / 3) + 1;
  for (const auto& candidate : known) {
    const std::size_t d = edit_distance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

std::string number_range::describe() const {
  const bool has_lo = std::isfinite(lo);
  const bool has_hi = std::isfinite(hi);
  if (has_lo && has_hi) {
    return "a number in " + std::string(lo_inclusive ? "[" : "(") + format_number(lo) + ", " +
           format_number(hi) + (hi_inclusive ? "]" : ")");
  }
  if (has_lo) return std::string("a number ") + (lo_inclusive ? ">= " : "> ") + format_number(lo);
  if (has_hi) return std::string("a number ") + (hi_inclusive ? "<= " : "< ") + format_number(hi);
  return "a number";
}

bool number_range::contains(double v) const {
  if (!std::isfinite(v)) return false;
  if (lo_inclusive ? v < lo : v <= lo) return false;
  if (hi_inclusive ? v > hi : v >= hi) return false;
  return true;
}

std::int64_t as_integer(const nlohmann::json& v, const std::string& path, std::int64_t lo,
                        std::int64_t hi) {
  std::string expected = "an integer >= " + std::to_string(lo);
  if (hi < std::numeric_limits<int>::max()) {
    expected = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  }
  std::int64_t n = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail_value(path, v, expected);
    }
    n = static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    n = v.get<std::int64_t>();
  } else if (v.is_number_float()) {
    // 1e3 style integers are accepted; 2.5 is not.
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) > 9.0e18) {
      fail_value(path, v, expected);
    }
    n = static_cast<std::int64_t>(d);
  } else {
    fail_value(path, v, expected);
  }
  if (n < lo || n > hi) fail_value(path, v, expected);
  return n;
}

std::uint64_t as_unsigned(const nlohmann::json& v, const std::string& path) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  }
  if (v.is_number_float()) {  // 1e9 style integers are accepted, as for signed fields
    const double d = v.get<double>();
    if (std::isfinite(d) && d >= 0 && std::floor(d) == d && d < 1.8e19) return static_cast<std::uint64_t>(d);
  }
  fail_value(path, v, "an integer >= 0");
}

double as_number(const nlohmann::json& v, const std::string& path, const number_range& range) {
  if (!v.is_number()) fail_value(path, v, range.describe());
  const double d = v.get<double>();
  if (!range.contains(d)) fail_value(path, v, range.describe());
  return d;
}

bool as_bool(const nlohmann::json& v, const std::string& path) {
  if (!v.is_boolean()) fail_value(path, v, "true or false");
  return v.get<bool>();
}

std::string as_string(const nlohmann::json& v, const std::string& path, bool allow_empty) {
  if (!v.is_string()) fail_value(path, v, allow_empty ? "a string" : "a non-empty string");
  std::string s = v.get<std::string>();
  if (s.empty() && !allow_empty) fail_value(path, v, "a non-empty string");
  return s;
}

resource_quantities as_resources(const nlohmann::json& v, const std::string& path) {
  if (!v.is_object()) {
    fail_value(path, v, "an object of resource name -> quantity, e.g. {\"CPU\": 4, \"GPU\": 1}");
  }
  resource_quantities out;
  for (const auto& [name, quantity] : v.items()) {
    const std::string entry_path = join_path(path, name);
    if (!valid_resource_name(name)) {
      throw spec_error(entry_path,
                       "resource name \"" + name + "\" is not allowed; expected " + resource_name_rule);
    }
    out[name] = as_number(quantity, entry_path, number_range{0.0, true});
  }
  return out;
}

object_reader::object_reader(const nlohmann::json& object, std::string path,
                             std::map<std::string, std::string>* given)
    : object_(object), path_(std::move(path)), given_(given) {
  if (!object_.is_object()) fail_value(path_, object_, "a JSON object");
}

const nlohmann::json* object_reader::find(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  const auto it = object_.find(key);
  if (it == object_.end()) return nullptr;
  if (given_) (*given_)[child(key)] = child(key);
  return &*it;
}

const nlohmann::json& object_reader::require(const std::string& key, const std::string& expected) {
  const nlohmann::json* v = find(key);
  if (!v) throw spec_error(child(key), "missing; expected " + expected);
  return *v;
}

bool object_reader::read(const std::string& key, int& out, std::int64_t lo, std::int64_t hi) {
  const nlohmann::json* v = find(key);
  if (v) out = static_cast<int>(as_integer(*v, child(key), lo, hi));
  return v != nullptr;
}

bool object_reader::read(const std::string& key, std::int64_t& out, std::int64_t lo) {
  const nlohmann::json* v = find(key);
  if (v) out = as_integer(*v, child(key), lo);
  return v != nullptr;
}

bool object_reader::read(const std::string& key, std::uint64_t& out) {
  const nlohmann::json* v = find(key);
  if (v) out = as_unsigned(*v, child(key));
  return v != nullptr;
}

bool object_reader::read(const std::string& key, double& out, const number_range& range) {
  const nlohmann::json* v = find(key);
  if (v) out = as_number(*v, child(key), range);
  return v != nullptr;
}

bool object_reader::read(const std::string& key, bool& out) {
  const nlohmann::json* v = find(key);
  if (v) out = as_bool(*v, child(key));
  return v != nullptr;
}

bool object_reader::read(const std::string& key, std::string& out, bool allow_empty) {
  const nlohmann::json* v = find(key);
  if (v) out = as_string(*v, child(key), allow_empty);
  return v != nullptr;
}

bool object_reader::read(const std::string& key, resource_quantities& out) {
  const nlohmann::json* v = find(key);
  if (v) out = as_resources(*v, child(key));
  return v != nullptr;
}

void object_reader::finish() const {
  for (const auto& item : object_.items()) {
    if (std::find(known_.begin(), known_.end(), item.key()) != known_.end()) continue;
    std::string message = "unknown key.";
    const std::string suggestion = closest_key(item.key(), known_);
    if (!suggestion.empty()) message = "unknown key; did you mean \"" + suggestion + "\"?";
    std::string allowed;
    for (const auto& k : known_) allowed += (allowed.empty() ? "" : ", ") + k;
    message += " Allowed keys here: " + allowed;
    throw spec_error(child(item.key()), message);
  }
}

}  // namespace cohort::config

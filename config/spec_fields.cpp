// The readers of the field rules that take more than a line (spec_fields.hpp): node lists, step
// lists, environment variables and endpoint URLs.
#include "config/spec_fields.hpp"

#include <cctype>

#include "config/nodes_spec.hpp"

namespace cohort::config {
namespace {

// Why an environment variable name may not be set by a job ("" when it may).
std::string refused_env_name(const std::string& name) {
  const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  const auto ends = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (name.empty() || name.size() > 128 || std::isdigit(static_cast<unsigned char>(name[0])) ||
      !std::all_of(name.begin(), name.end(),
                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }))
    return "is not a valid variable name (1-128 characters from [A-Za-z0-9_], not starting with a digit)";
  if (name == "CUDA_VISIBLE_DEVICES" || name == "NVIDIA_VISIBLE_DEVICES")
    return "is set by cohort: the head assigns each worker its GPUs";
  if (starts("COHORT_") && name != gpu_memory_limit_variable)
    return std::string("is cohort's own; the only COHORT_ variable a job may set is ") +
           gpu_memory_limit_variable;
  if (starts("LD_") || ends("PATH") || ends("_PRELOAD") || starts("PYTHON") || starts("PERL5") ||
      name == "PERLLIB" || starts("RUBY") || name == "NODE_OPTIONS" || name == "BASH_ENV" || name == "ENV" ||
      name == "IFS" || name == "SHELLOPTS" || name == "BASHOPTS" || name == "PS4" || starts("BASH_FUNC_") ||
      starts("MALLOC_") || name == "GLIBC_TUNABLES" || name == "LOCPATH" || name == "NLSPATH" ||
      name == "HOSTALIASES" || name == "RES_OPTIONS" || (starts("NCCL_") && ends("_PLUGIN")) ||
      starts("CUDA_INJECTION"))
    return "could change what code the worker process loads or runs";
  return "";
}

}  // namespace

namespace detail {

void read_field(object_reader& r, const spec_field<std::vector<std::string>, node_list_rule>& f) {
  const nlohmann::json* nodes = r.find(f.key);
  if (!nodes) return;
  const std::string path = r.child(f.key);
  if (!nodes->is_array()) fail_value(path, *nodes, "an array of node names, e.g. [\"n1\", \"n2\"]");
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    const nlohmann::json& v = (*nodes)[i];
    if (!v.is_string() || !valid_node_name(v.get<std::string>()))
      fail_value(at, v, std::string("a node name, ") + node_name_rule);
    if (std::find(f.value.begin(), f.value.end(), v.get<std::string>()) != f.value.end())
      throw spec_error(at, "node \"" + v.get<std::string>() + "\" is named twice; name each node once");
    f.value.push_back(v.get<std::string>());
  }
}

void read_field(object_reader& r, const spec_field<std::vector<std::int64_t>, step_list_rule>& f) {
  const nlohmann::json* steps = r.find(f.key);
  if (!steps) return;
  const std::string path = r.child(f.key);
  if (!steps->is_array()) fail_value(path, *steps, "an array of strictly increasing steps >= 1");
  std::int64_t last = 0;
  for (std::size_t i = 0; i < steps->size(); ++i) {
    const nlohmann::json& v = (*steps)[i];
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (!v.is_number_integer() || v.get<std::int64_t>() <= last)
      fail_value(at, v,
                 last == 0 ? "an integer step >= 1"
                           : "an integer step > " + std::to_string(last) + " (the steps strictly increase)");
    last = v.get<std::int64_t>();
    f.value.push_back(last);
  }
}

void read_field(object_reader& r, const spec_field<std::map<std::string, std::string>, env_map_rule>& f) {
  const nlohmann::json* vars = r.find(f.key);
  if (!vars) return;
  const std::string path = r.child(f.key);
  if (!vars->is_object()) fail_value(path, *vars, "an object of variable name -> string value");
  if (vars->size() > max_env_vars)
    throw spec_error(path, "has " + std::to_string(vars->size()) + " variables; at most " +
                               std::to_string(max_env_vars) + " are allowed");
  for (const auto& [name, value] : vars->items()) {
    const std::string at = path + "." + name;
    if (const auto why = refused_env_name(name); !why.empty())
      throw spec_error(at, "refused: " + why + ". Allowed: " + runtime_env_rules);
    const std::string text = as_string(value, at, true);
    if (text.size() > max_env_var_bytes || text.find('\0') != std::string::npos)
      fail_value(
          at, value,
          "a string of at most " + std::to_string(max_env_var_bytes) + " bytes without NUL characters");
    if (name == gpu_memory_limit_variable && gpu_memory_limit_gib(text) <= 0)
      fail_value(at, value, "a number of GiB > 0 as a string, e.g. \"20\"");
    f.value[name] = text;
  }
}

void read_field(object_reader& r, const spec_field<std::string, endpoint_rule>& f) {
  if (r.read(f.key, f.value, true) && !f.value.empty() && f.value.rfind("http://", 0) != 0 &&
      f.value.rfind("https://", 0) != 0)
    throw spec_error(r.child(f.key), "\"" + f.value + "\" must be an endpoint URL, " + endpoint_form +
                                         " (\"\": AWS's, or AWS_ENDPOINT_URL)");
}

}  // namespace detail
}  // namespace cohort::config

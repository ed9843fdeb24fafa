// docs/job-spec.md documents every field the job spec parser accepts. The fields are not listed
// here: they are found by asking the parser itself. At each object it is given an unknown key and
// its refusal lists the keys it knows there ("Allowed keys here: ..."); each key is then probed
// with an object to see whether the parser reads fields inside it. The DeepSpeed block is walked
// the same way, so a new parser field (or DeepSpeed key) without a line in the doc fails here.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"
#include "tests/config/spec_test_support.hpp"

using json = nlohmann::json;
using cohort::config::parse_job_spec;
using cohort::config::spec_error;

namespace {

const std::string probe_key = "zz_probe_unknown_key";

std::vector<std::string> split_keys(const std::string& path) {
  std::vector<std::string> keys;
  std::string key;
  for (const char c : path) {
    if (c == '.') {
      keys.push_back(key);
      key.clear();
    } else {
      key += c;
    }
  }
  if (!key.empty()) keys.push_back(key);
  return keys;
}

json& at_path(json& doc, const std::string& path) {
  json* node = &doc;
  for (const auto& key : split_keys(path)) node = &(*node)[key];
  return *node;
}

std::string child(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// Walks the object at `path` of `doc` (a spec the parser accepts up to that object): records every
// key the parser reads there and descends into the ones it reads fields from.
void walk(json doc, const std::string& path, std::set<std::string>& fields, int depth = 0) {
  REQUIRE(depth < 10);
  json probe = doc;
  at_path(probe, path)[probe_key] = 1;
  try {
    parse_job_spec(probe.dump());
    return;  // a free-form object (resource quantities, an inline model config): no fields of its own
  } catch (const spec_error& e) {
    const std::string what = e.what();
    const std::string marker = "Allowed keys here: ";
    if (e.path() == child(path, probe_key) && what.find(marker) != std::string::npos) {
      std::stringstream list(what.substr(what.find(marker) + marker.size()));
      std::string key;
      while (std::getline(list, key, ',')) {
        key.erase(0, key.find_first_not_of(' '));
        const std::string field = child(path, key);
        fields.insert(field);
        json inner = doc;
        if (!at_path(inner, field).is_object()) at_path(inner, field) = json::object();
        walk(inner, field, fields, depth + 1);
      }
      return;
    }
    // An object that needs a key before it reads the others (deepspeed.scheduler needs "type"):
    // walk it once with each value the refusal names.
    const std::string missing = "missing; expected ";
    const std::string prefix = child(path, "");
    if (what.find(missing) != std::string::npos && e.path().rfind(prefix, 0) == 0 &&
        e.path().size() > prefix.size() && e.path().find('.', prefix.size()) == std::string::npos) {
      const std::string required = e.path().substr(prefix.size());
      const std::string expected = what.substr(what.find(missing) + missing.size());
      const std::regex quoted("\"([^\"]+)\"");
      bool any = false;
      for (auto it = std::sregex_iterator(expected.begin(), expected.end(), quoted);
           it != std::sregex_iterator(); ++it) {
        json variant = doc;
        at_path(variant, path)[required] = (*it)[1].str();
        walk(variant, path, fields, depth + 1);
        any = true;
      }
      CHECK(any);
    }
    // Anything else: a value that is not an object; the field itself was recorded by the caller.
  }
}

std::set<std::string> accepted_fields() {
  std::set<std::string> fields;
  walk(json::parse(cohort::config::testing::patched_spec("{}")), "", fields);
  return fields;
}

std::string read_doc() {
  std::ifstream in(COHORT_JOB_SPEC_DOC);
  REQUIRE(in.good());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("the walk over the parser finds the fields of every part of the spec and of DeepSpeed",
          "[config]") {
  const std::set<std::string> fields = accepted_fields();
  for (const char* field :
       {"name", "train.lr", "run.checkpoint.every_steps", "run.failure.max_failures",
        "runtime_env.env_vars", "scaling.resources_per_worker", "zero.offload_param",
        "deepspeed.zero_optimization.offload_optimizer.device", "deepspeed.optimizer.params.betas",
        "deepspeed.scheduler.params.cos_min_ratio", "deepspeed.scheduler.params.warmup_max_lr"}) {
    INFO(field);
    CHECK(fields.count(field) == 1);
  }
  CHECK(fields.size() > 80);
}

TEST_CASE("every field the job spec parser accepts is documented in docs/job-spec.md", "[config]") {
  const std::string doc = read_doc();
  std::vector<std::string> undocumented;
  for (const auto& field : accepted_fields()) {
    if (doc.find("`" + field + "`") == std::string::npos) undocumented.push_back(field);
  }
  std::string list;
  for (const auto& field : undocumented) list += "\n  " + field;
  INFO("fields the parser accepts that docs/job-spec.md does not name as `path`:" << list);
  CHECK(undocumented.empty());
}

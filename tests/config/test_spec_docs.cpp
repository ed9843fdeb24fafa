// docs/job-spec.md documents every field the job spec parser accepts. The fields are not listed
// here: they are found by asking the parser itself. At each object it is given an unknown key and
// its refusal lists the keys it knows there ("Allowed keys here: ..."); each key is then probed
// with an object to see whether the parser reads fields inside it. The DeepSpeed block is walked
// the same way, so a new parser field (or DeepSpeed key) without a line in the doc fails here.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"
#include "config/nodes_spec.hpp"
#include "config/spec_fields.hpp"
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

// ---- The sections' field lists (config/spec_fields.hpp) against their rows in the docs ----

namespace {

using namespace cohort::config;

// A number as the docs write it: integral ones with ".0", others in the fewest digits that read
// back the same, an exponent without leading zeros ("1e-8").
std::string doc_number(double v) {
  if (v == static_cast<double>(static_cast<std::int64_t>(v)))
    return std::to_string(static_cast<std::int64_t>(v)) + ".0";
  char text[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, v);
    if (std::strtod(text, nullptr) == v) break;
  }
  std::string out = text;
  if (auto e = out.find("e-0"); e != std::string::npos) out.erase(e + 2, 1);
  return out;
}

// A rule's text with its character class in backquotes, as the docs write it:
// "1-128 characters from `[A-Za-z0-9._:-]`".
std::string doc_code_class(const std::string& text) {
  const auto open = text.find('['), close = text.rfind(']');
  if (open == std::string::npos || close == std::string::npos) return text;
  return text.substr(0, open) + "`" + text.substr(open, close - open + 1) + "`" + text.substr(close + 1);
}

// The Type cell of a value of type T: "boolean", "number", "integer", "string" (strings and enums).
template <class T>
std::string doc_scalar_type() {
  if constexpr (std::is_same_v<T, bool>)
    return "boolean";
  else if constexpr (std::is_same_v<T, double>)
    return "number";
  else
    return std::is_integral_v<T> ? "integer" : "string";
}

template <class T>
struct is_map : std::false_type {};
template <class V>
struct is_map<std::map<std::string, V>> : std::true_type {};
template <class T>
struct is_vector : std::false_type {};
template <class V>
struct is_vector<std::vector<V>> : std::true_type {};

// The Type cell: the rule's where it says more than the member's type (paths, URLs, the two forms
// of model.config, sections), else the member's: "object name → number", "array of strings", ...
template <class T, class Rule>
std::string doc_type(const Rule& rule) {
  if constexpr (std::is_same_v<Rule, path_rule>)
    return rule.s3 ? "string (path or S3 URL)" : "string (path)";
  else if constexpr (std::is_same_v<Rule, config_form_rule>)
    return "string (path) or object";
  else if constexpr (std::is_same_v<Rule, endpoint_rule>)
    return "string (URL)";
  else if constexpr (std::is_same_v<Rule, section_rule>)
    return "object";
  else if constexpr (is_map<T>::value)
    return "object name → " + doc_scalar_type<typename T::mapped_type>();
  else if constexpr (is_vector<T>::value)
    return "array of " + doc_scalar_type<typename T::value_type>() + "s";
  else
    return doc_scalar_type<T>();
}

template <class T>
std::string doc_value(const T& v) {
  if constexpr (std::is_same_v<T, bool>)
    return v ? "true" : "false";
  else if constexpr (std::is_same_v<T, double>)
    return doc_number(v);
  else if constexpr (std::is_integral_v<T>)
    return std::to_string(v);
  else if constexpr (std::is_enum_v<T>)
    return "\"" + std::string(to_string(v)) + "\"";
  else
    return "\"" + v + "\"";
}

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

// What the Default cell starts with: the value in backquotes; "—" for a path that may be absent
// (nothing to default to) and for a section that is absent unless given; "defaults below" for a
// section of defaults; "required" for a list the section needs; nullopt for an optional or a
// default taken from other fields, which the row's prose explains.
template <class T, class Rule>
std::optional<std::string> doc_default(const T& v, const Rule& rule) {
  if constexpr (std::is_same_v<Rule, path_rule>)
    return !v.empty() ? "`" + doc_value(v) + "`" : rule.allow_empty ? "`\"\"`" : "—";
  else if constexpr (std::is_same_v<Rule, config_form_rule>)
    return std::string("—");
  else if constexpr (std::is_same_v<Rule, section_rule>)
    return std::string(section_absent(v) ? "—" : "defaults below");
  else if constexpr (std::is_same_v<Rule, resource_map_rule>)
    return rule.derived_default ? std::nullopt : std::optional<std::string>("`" + json(v).dump() + "`");
  else if constexpr (std::is_same_v<Rule, env_map_rule> || std::is_same_v<Rule, node_list_rule> ||
                     std::is_same_v<Rule, step_list_rule>)
    return "`" + json(v).dump() + "`";
  else if constexpr (std::is_same_v<Rule, name_list_rule>)
    return std::string("required");
  else if constexpr (is_optional<T>::value)
    return std::nullopt;
  else
    return "`" + doc_value(v) + "`";
}

std::string doc_rule(const integer_rule& r) {
  if (r.hi == std::numeric_limits<int>::max() || r.hi == std::numeric_limits<std::int64_t>::max())
    return "`>= " + std::to_string(r.lo) + "`";
  return std::to_string(r.lo) + " to " + std::to_string(r.hi);
}
std::string doc_rule(const unsigned_rule& r) { return "`>= " + std::to_string(r.lo) + "`"; }
std::string doc_rule(const path_rule& r) { return r.allow_empty ? "a path" : "a non-empty path"; }
std::string doc_rule(const name_list_rule&) { return "a non-empty list, each name once, of"; }
std::string doc_rule(const flag_rule&) { return "`true`, `false`"; }
std::string doc_rule(const string_rule&) { return ""; }  // what it names is the prose's
std::string doc_rule(const section_rule&) { return ""; }  // its fields have rows of their own
std::string doc_rule(const config_form_rule&) {
  return "a `config.json` path, or an inline Hugging Face-style config object";
}
std::string doc_rule(const endpoint_rule&) { return std::string("`\"\"`, or `") + endpoint_form + "`"; }
std::string doc_rule(const resource_map_rule&) {
  return "names of " + doc_code_class(resource_name_rule) + ", quantities `>= 0`";
}
std::string doc_rule(const node_list_rule&) { return "node names of " + doc_code_class(node_name_rule); }
std::string doc_rule(const step_list_rule&) { return "strictly increasing steps `>= 1`"; }
std::string doc_rule(const env_map_rule&) {
  return "at most " + std::to_string(max_env_vars) + " variables, values of at most " +
         std::to_string(max_env_var_bytes) + " bytes";
}
// A range's bound as the docs write it: "1", "86400" (no ".0"), else as a number.
std::string doc_bound(double v) {
  const auto text = doc_number(v);
  return text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0 ? text.substr(0, text.size() - 2) : text;
}
std::string doc_rule(const number_range& r) {
  if (std::isinf(r.hi)) return std::string("`") + (r.lo_inclusive ? ">= " : "> ") + doc_bound(r.lo) + "`";
  return std::string("`") + (r.lo_inclusive ? "[" : "(") + doc_bound(r.lo) + ", " + doc_bound(r.hi) +
         (r.hi_inclusive ? "]" : ")") + "`";
}
template <class E>
std::string doc_rule(const enum_rule<E>& r) {
  std::string out;
  for (const auto& [name, value] : *r.names)
    out += (out.empty() ? "" : ", ") + std::string("`\"") + name + "\"`";
  return out;
}

std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::istringstream in(line);
  for (std::string cell; std::getline(in, cell, '|');) {
    const auto b = cell.find_first_not_of(' ');
    const auto e = cell.find_last_not_of(' ');
    cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
  }
  return cells;
}

// The cells of the row of `path` ("train.seq_len") in a table of at least `columns` columns;
// empty when there is none. The reference tables have 5 (Field, Type, Default, Allowed, What it
// does; train's and zero's a 6th, DeepSpeed key); the DeepSpeed table has 3 (DeepSpeed key,
// cohort field, Allowed).
std::vector<std::string> doc_row(const std::string& doc, const std::string& path, std::size_t columns = 5) {
  const std::string start = "\n| `" + path + "` | ";
  for (auto at = doc.find(start); at != std::string::npos; at = doc.find(start, at + 1)) {
    const auto end = doc.find('\n', at + 1);
    auto cells = table_cells(doc.substr(at + 3, end - at - 3));  // without the leading "\n| "
    if (cells.size() >= columns) return cells;
  }
  return {};
}

// The DeepSpeed keys a "DeepSpeed key" cell names, each as the DeepSpeed table writes it
// ("deepspeed.optimizer.params.betas" for `optimizer.params.betas[0]`).
std::set<std::string> deepspeed_keys(const std::string& cell) {
  std::set<std::string> keys;
  const std::regex quoted("`([^`\\[]+)(\\[[0-9]+\\])?`");
  for (auto it = std::sregex_iterator(cell.begin(), cell.end(), quoted); it != std::sregex_iterator(); ++it)
    keys.insert("deepspeed." + (*it)[1].str());
  return keys;
}

// Checks the rows of `section`'s fields, and of the sections inside it; records the DeepSpeed keys
// each field's entry names in `mapped` (field path -> keys).
template <class Fields>
void check_rows(const std::string& doc, const std::string& section, const Fields& fields,
                std::map<std::string, std::set<std::string>>& mapped) {
  for_each_field(fields, [&](const auto& f) {
    using T = std::decay_t<decltype(f.value)>;
    using R = std::decay_t<decltype(f.rule)>;
    const std::string path = section + "." + f.key;
    const auto cells = doc_row(doc, path);
    INFO("docs/job-spec.md, the row of `" << path << "`");
    REQUIRE(cells.size() >= 5);
    CHECK(cells[1] == doc_type<T>(f.rule));
    if (const auto start = doc_default(f.value, f.rule)) CHECK_THAT(cells[2], Catch::StartsWith(*start));
    CHECK_THAT(cells[3], Catch::StartsWith(doc_rule(f.rule)));
    // The DeepSpeed key column, where the section's table has one, says what the entry says.
    if (cells.size() >= 6)
      CHECK(cells[5] == (f.deepspeed ? f.deepspeed : "—"));
    else
      CHECK(f.deepspeed == nullptr);
    if (f.deepspeed) mapped[path] = deepspeed_keys(f.deepspeed);
    if constexpr (std::is_same_v<R, section_rule>) check_rows(doc, path, section_fields(f.value), mapped);
  });
}

// Each section's list checked against the docs: field path -> the DeepSpeed keys its entry names.
std::map<std::string, std::set<std::string>> check_sections(const std::string& doc) {
  const job_spec defaults;
  std::map<std::string, std::set<std::string>> mapped;
  check_rows(doc, "model", model_fields(defaults.model), mapped);
  check_rows(doc, "data", data_fields(defaults.data), mapped);
  check_rows(doc, "scaling", scaling_fields(defaults.scaling), mapped);
  check_rows(doc, "train", train_fields(defaults.train), mapped);
  check_rows(doc, "zero", zero_fields(defaults.zero), mapped);
  check_rows(doc, "run", run_fields(defaults.run), mapped);
  check_rows(doc, "runtime_env", runtime_env_fields(defaults.runtime_env), mapped);
  return mapped;
}

}  // namespace

TEST_CASE(
    "each field of the spec's field lists has its row in docs/job-spec.md with the type, the "
    "default, the rule and the DeepSpeed key the list gives it",
    "[config]") {
  const auto mapped = check_sections(read_doc());
  CHECK(mapped.count("train.lr") == 1);
  CHECK(mapped.count("zero.stage") == 1);
}

TEST_CASE(
    "the DeepSpeed keys of the field lists are the mapped keys of docs/job-spec.md's DeepSpeed table, "
    "each onto the field whose entry names it",
    "[config]") {
  const std::string doc = read_doc();
  const auto mapped = check_sections(doc);
  // Each key an entry names has its row in the DeepSpeed table, naming the entry's field.
  for (const auto& [field, keys] : mapped) {
    for (const auto& key : keys) {
      INFO(field << " <- " << key);
      const auto cells = doc_row(doc, key, 3);
      REQUIRE(cells.size() >= 3);
      CHECK_THAT(cells[1], Catch::Contains("`" + field + "`"));
    }
  }
  // Each row of the table that sets a listed section's field is named by that field's entry.
  const std::regex row("\n\\| `(deepspeed\\.[^`]+)` \\| ([^|]*) \\|");
  const std::regex field("`((train|zero|model|data|scaling|run|runtime_env)\\.[a-z_0-9.]+)`");
  int rows = 0;
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), row); it != std::sregex_iterator(); ++it) {
    const std::string key = (*it)[1].str(), target = (*it)[2].str();
    for (auto f = std::sregex_iterator(target.begin(), target.end(), field); f != std::sregex_iterator();
         ++f) {
      INFO(key << " -> " << (*f)[1].str());
      const auto entry = mapped.find((*f)[1].str());
      REQUIRE(entry != mapped.end());
      CHECK(entry->second.count(key) == 1);
      ++rows;
    }
  }
  CHECK(rows >= 15);
}

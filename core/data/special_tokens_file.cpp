// read_special_tokens_file: {"tokens": [...]} from disk, every failure naming the file.
#include "core/data/special_tokens_file.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/data/format.hpp"

namespace cohort::core::data {

std::vector<std::string> read_special_tokens_file(const std::string& path, const std::string& what) {
  using nlohmann::json;
  const std::string where = what.empty() ? path : what + " " + path;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw data_error(where + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    throw data_error(where + ": invalid JSON (" + e.what() + ")");
  }
  const auto it = j.is_object() ? j.find("tokens") : j.end();
  if (it == j.end() || !it->is_array())
    throw data_error(where + ": expected {\"tokens\": [\"<USER>\", ...]}");
  std::vector<std::string> out;
  for (const auto& t : *it) {
    if (!t.is_string() || t.get_ref<const std::string&>().empty())
      throw data_error(where + ": every entry of \"tokens\" must be a non-empty string");
    out.push_back(t.get<std::string>());
  }
  return out;
}

}  // namespace cohort::core::data

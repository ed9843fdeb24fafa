// Reading and checking NODES.json, the cluster node descriptions (see nodes_spec.hpp).
#include "config/nodes_spec.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "config/json_fields.hpp"

namespace cohort::config {
namespace {

using json = nlohmann::json;

json parse_text(const std::string& text, const std::string& path, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number past double
    throw spec_error(path, what + " is not valid JSON: " + e.what());
  }
}

}  // namespace

bool valid_node_name(const std::string& name) {
  return !name.empty() && name.size() <= 128 &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                  c == '-' || c == ':';
         });
}

std::vector<node_spec> parse_nodes_json(const std::string& json_text) {
  const json root = parse_text(json_text, "", "the node list");
  if (!root.is_array() || root.empty()) {
    fail_value("", root,
               "a non-empty array of nodes, e.g. [{\"name\": \"n1\", \"resources\": {\"CPU\": 8}}]");
  }
  std::vector<node_spec> nodes;
  std::set<std::string> names;
  for (std::size_t i = 0; i < root.size(); ++i) {
    const std::string path = "[" + std::to_string(i) + "]";
    object_reader r(root[i], path);
    node_spec node;
    const json& name = r.require("name", "the node name, a string");
    node.name = as_string(name, r.child("name"));
    if (!valid_node_name(node.name)) {
      fail_value(r.child("name"), name, node_name_rule);
    }
    if (!names.insert(node.name).second) {
      throw spec_error(r.child("name"), "node name \"" + node.name +
                                            "\" appears more than once; node names must be unique");
    }
    node.resources = as_resources(r.require("resources", "an object of resource name -> quantity"),
                                  r.child("resources"));
    double gpu_memory = 0;
    if (r.read("gpu_memory", gpu_memory, number_range{0.0, true}))
      node.gpu_memory_bytes = static_cast<std::int64_t>(gpu_memory);
    r.finish();
    nodes.push_back(std::move(node));
  }
  return nodes;
}

std::vector<node_spec> load_nodes_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw spec_error("", "cannot read node list \"" + path +
                             "\"; check that the file exists and is readable");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_nodes_json(text.str());
}

resource_quantities parse_resources_json(const std::string& json_text, const std::string& what) {
  return as_resources(parse_text(json_text, what, what), what);
}

}  // namespace cohort::config

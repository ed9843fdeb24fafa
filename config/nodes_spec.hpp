// Cluster node descriptions: the NODES.json that `submit plan --nodes` reads,
// [{"name": "n1", "resources": {"CPU": 8, "GPU": 1, "memory": 6.4e10, "large_cpu_mem": 1},
//   "gpu_memory": 2.4e10}, ...] (gpu_memory: bytes per GPU, optional),
// and the resource objects cluster-worker takes on its command line. Errors are spec_errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/job_spec.hpp"

namespace cohort::config {

// Whether `name` can name a node: 1-128 characters from [A-Za-z0-9._:-]; what the rule allows, for
// error messages.
bool valid_node_name(const std::string& name);
inline constexpr const char* node_name_rule = "1-128 characters from [A-Za-z0-9._:-]";

struct node_spec {
  std::string name;                // unique, 1-128 characters from [A-Za-z0-9._:-]
  resource_quantities resources;   // quantities >= 0
  std::int64_t gpu_memory_bytes = 0;  // per GPU (the smallest of the node's); 0 = unknown
};

// Parses a NODES.json array. Errors name the JSON path ("[1].resources.CPU"), the value and what
// is allowed; an empty array, a missing name or a duplicate name is an error too.
std::vector<node_spec> parse_nodes_json(const std::string& json_text);
// Reads and parses a NODES.json file; an unreadable file is a spec_error naming it.
std::vector<node_spec> load_nodes_file(const std::string& path);
// Parses one resource object such as '{"large_cpu_mem": 1}'; what names it in errors
// ("--resources").
resource_quantities parse_resources_json(const std::string& json_text, const std::string& what);

}  // namespace cohort::config

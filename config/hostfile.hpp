// A node list in the hostfile form of DeepSpeed's launcher, what `cohort-bench --nodes` reads: one
// node a line, `NAME [slots=N]` (N workers on that node, default 1), `#` starts a comment, blank
// lines are skipped. NAME is a cluster node's name (`cluster-worker --name`). Errors are
// spec_errors whose path is "FILE:LINE".
#pragma once

#include <string>
#include <vector>

namespace cohort::config {

struct host_entry {
  std::string name;
  int slots = 1;  // 1 to 65536
  int line = 0;   // where the file lists it (1-based), for errors about the node
};

// Parses hostfile text; `file` names it in errors ("nodes.txt:3: ..."). Each error says what the
// line holds and what is allowed: a bad name, a bad or repeated slots=, an unknown word, a name
// listed twice, or no node at all.
std::vector<host_entry> parse_hostfile(const std::string& text, const std::string& file);
// Reads and parses a hostfile; an unreadable file is a spec_error naming it.
std::vector<host_entry> load_hostfile(const std::string& path);

}  // namespace cohort::config

// Reading hostfile node lists (see hostfile.hpp).
#include "config/hostfile.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "config/job_spec.hpp"
#include "config/nodes_spec.hpp"

namespace cohort::config {

std::vector<host_entry> parse_hostfile(const std::string& text, const std::string& file) {
  std::vector<host_entry> hosts;
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const std::string where = file + ":" + std::to_string(number);
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string word;
    if (!(words >> word)) continue;
    host_entry host;
    host.line = number;
    if (!valid_node_name(word))
      throw spec_error(where, "node name \"" + word + "\" is not one; allowed: " + node_name_rule +
                                  ", then optionally slots=N (\"n1 slots=2\")");
    if (std::any_of(hosts.begin(), hosts.end(), [&](const host_entry& h) { return h.name == word; }))
      throw spec_error(where, "node \"" + word + "\" is listed twice; list each node once");
    host.name = word;
    bool slots_given = false;
    while (words >> word) {
      if (word.rfind("slots=", 0) != 0)
        throw spec_error(where, "\"" + word + "\" after node " + host.name +
                                    " is not slots=N; allowed: NAME [slots=N], # for a comment");
      if (slots_given) throw spec_error(where, "slots= is given twice for node " + host.name);
      slots_given = true;
      const std::string value = word.substr(6);
      std::size_t used = 0;
      long slots = 0;
      try {
        slots = std::stol(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != value.size() || slots < 1 || slots > 65536)
        throw spec_error(where, "slots=" + value + " for node " + host.name +
                                    " is not a number of workers; allowed: an integer from 1 to 65536");
      host.slots = static_cast<int>(slots);
    }
    hosts.push_back(std::move(host));
  }
  if (hosts.empty())
    throw spec_error(file, "lists no node; write one node a line, NAME [slots=N] (\"n1 slots=2\")");
  return hosts;
}

std::vector<host_entry> load_hostfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw spec_error(path, "cannot read the node list; check that the file exists and is readable");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

}  // namespace cohort::config

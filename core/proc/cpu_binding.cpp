// CPU shares of a node's ranks and binding a process to one (see cpu_binding.hpp).
#include "core/proc/cpu_binding.hpp"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <system_error>

namespace cohort::core::proc {
namespace {

cpu_set_t set_of(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE)
      throw std::invalid_argument("CPU " + std::to_string(c) + " is outside 0 to " +
                                  std::to_string(CPU_SETSIZE - 1));
    CPU_SET(c, &set);
  }
  return set;
}

// The ids of this process's threads (/proc/self/task).
std::vector<pid_t> thread_ids() {
  std::vector<pid_t> out;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) throw std::system_error(errno, std::generic_category(), "opendir /proc/self/task");
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  }
  ::closedir(dir);
  return out;
}

}  // namespace

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0)
    throw std::system_error(errno, std::generic_category(), "sched_getaffinity");
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

namespace {

// The refusals of every share: no CPUs, or a local rank outside [0, local_world).
void check_share(const std::vector<int>& cpus, int local_rank, int local_world) {
  if (cpus.empty()) throw std::invalid_argument("no CPUs to share");
  if (local_world < 1 || local_rank < 0 || local_rank >= local_world)
    throw std::invalid_argument("local rank " + std::to_string(local_rank) + " of " +
                                std::to_string(local_world) + "; allowed: 0 to local_world - 1");
}

}  // namespace

std::vector<int> cpu_share(const std::vector<int>& cpus, int local_rank, int local_world) {
  check_share(cpus, local_rank, local_world);
  const int count = static_cast<int>(cpus.size());
  if (count < local_world) return {cpus[static_cast<std::size_t>(local_rank % count)]};
  const int base = count / local_world, larger = count % local_world;
  const int first = local_rank * base + std::min(local_rank, larger);
  const int size = base + (local_rank < larger ? 1 : 0);
  return std::vector<int>(cpus.begin() + first, cpus.begin() + first + size);
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  const auto bad = [&] {
    return std::invalid_argument("\"" + text +
                                 "\" is not a CPU list (allowed: ranges and numbers, e.g. 0-3,8)");
  };
  std::size_t at = 0;
  const auto number = [&] {
    std::size_t end = at;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == at || end - at > 6) throw bad();
    const int v = std::stoi(text.substr(at, end - at));
    at = end;
    return v;
  };
  while (at < text.size() && text[at] != '\n') {
    const int first = number();
    int last = first;
    if (at < text.size() && text[at] == '-') {
      ++at;
      last = number();
    }
    if (last < first) throw bad();
    for (int c = first; c <= last; ++c) out.push_back(c);
    if (at < text.size() && text[at] == ',') ++at;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::vector<int>> numa_node_cpus(const std::string& dir) {
  std::vector<std::pair<int, std::string>> found;  // node number, its cpulist file
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 4 && name.rfind("node", 0) == 0 &&
          std::all_of(name.begin() + 4, name.end(),
                      [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
        found.emplace_back(std::stoi(name.substr(4)), dir + "/" + name + "/cpulist");
    }
    ::closedir(d);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::vector<int>> nodes;
  for (const auto& [number, file] : found) {
    std::ifstream in(file);
    std::string text;
    std::getline(in, text);
    try {
      nodes.push_back(parse_cpu_list(text));
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(file + ": " + e.what());
    }
  }
  return nodes;
}

std::vector<int> numa_cpu_share(const std::vector<int>& cpus, const std::vector<std::vector<int>>& nodes,
                                int local_rank, int local_world) {
  std::vector<std::vector<int>> groups;
  std::vector<int> elsewhere;
  for (const auto& node : nodes) {
    std::vector<int> mine;
    std::set_intersection(cpus.begin(), cpus.end(), node.begin(), node.end(), std::back_inserter(mine));
    if (!mine.empty()) groups.push_back(std::move(mine));
  }
  for (int c : cpus)
    if (std::none_of(groups.begin(), groups.end(),
                     [&](const std::vector<int>& g) { return std::binary_search(g.begin(), g.end(), c); }))
      elsewhere.push_back(c);
  if (!elsewhere.empty()) groups.push_back(std::move(elsewhere));
  if (groups.size() <= 1) return cpu_share(cpus, local_rank, local_world);
  check_share(cpus, local_rank, local_world);
  const auto count = static_cast<std::int64_t>(groups.size());
  const auto group_of = [&](std::int64_t rank) { return rank * count / local_world; };
  if (local_world >= count) {
    const std::int64_t g = group_of(local_rank);
    std::int64_t first = local_rank, last = local_rank;  // the ranks that take group g
    while (first > 0 && group_of(first - 1) == g) --first;
    while (last + 1 < local_world && group_of(last + 1) == g) ++last;
    return cpu_share(groups[static_cast<std::size_t>(g)], static_cast<int>(local_rank - first),
                     static_cast<int>(last - first + 1));
  }
  std::vector<int> out;
  for (std::int64_t g = group_of(local_rank); g < group_of(local_rank + 1); ++g)
    out.insert(out.end(), groups[static_cast<std::size_t>(g)].begin(),
               groups[static_cast<std::size_t>(g)].end());
  std::sort(out.begin(), out.end());
  return out;
}

void bind_process_to_cpus(const std::vector<int>& cpus) {
  const cpu_set_t set = set_of(cpus);
  // The calling thread first: a thread it starts while the others are bound inherits the set.
  if (::sched_setaffinity(0, sizeof set, &set) != 0)
    throw std::system_error(errno, std::generic_category(), "binding to CPUs " + cpu_list_text(cpus));
  for (pid_t tid : thread_ids()) {
    // A thread that ended meanwhile (ESRCH) needs no binding.
    if (::sched_setaffinity(tid, sizeof set, &set) != 0 && errno != ESRCH)
      throw std::system_error(errno, std::generic_category(),
                              "binding thread " + std::to_string(tid) + " to CPUs " + cpu_list_text(cpus));
  }
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace cohort::core::proc

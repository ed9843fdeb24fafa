// CPU shares of a node's ranks and binding a process to one (see cpu_binding.hpp).
#include "core/proc/cpu_binding.hpp"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
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

std::vector<int> cpu_share(const std::vector<int>& cpus, int local_rank, int local_world) {
  if (cpus.empty()) throw std::invalid_argument("no CPUs to share");
  if (local_world < 1 || local_rank < 0 || local_rank >= local_world)
    throw std::invalid_argument("local rank " + std::to_string(local_rank) + " of " +
                                std::to_string(local_world) + "; allowed: 0 to local_world - 1");
  const int count = static_cast<int>(cpus.size());
  if (count < local_world) return {cpus[static_cast<std::size_t>(local_rank % count)]};
  const int base = count / local_world, larger = count % local_world;
  const int first = local_rank * base + std::min(local_rank, larger);
  const int size = base + (local_rank < larger ? 1 : 0);
  return std::vector<int>(cpus.begin() + first, cpus.begin() + first + size);
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

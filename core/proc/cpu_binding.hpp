// A rank's share of the CPUs its process may use (scaling.bind_cores_to_rank), as DeepSpeed's
// launcher binds each local rank to cores of its own: the allowed CPUs split into local_world
// contiguous parts in order, the first (count % local_world) parts one CPU larger; on a host of
// several NUMA nodes, within them (numa_cpu_share), so that a rank's threads, and the memory they
// touch first, stay on one node. Binding is of the whole process: every thread it has, and every
// thread those start afterwards.
#pragma once

#include <string>
#include <vector>

namespace cohort::core::proc {

// The CPUs this process may run on (sched_getaffinity), ascending. Throws std::system_error.
std::vector<int> allowed_cpus();

// Local rank `local_rank`'s part of `cpus` among `local_world` ranks; with fewer CPUs than ranks,
// the one CPU at local_rank % count (ranks then share). Throws std::invalid_argument naming what is
// wrong for an empty list or a local rank outside [0, local_world).
std::vector<int> cpu_share(const std::vector<int>& cpus, int local_rank, int local_world);

// The host's NUMA nodes in order, each the CPUs it holds (ascending), read from each
// <dir>/node<N>/cpulist; empty when `dir` shows none (no NUMA information: one node). Throws
// std::runtime_error naming the file for a cpulist that is not a CPU list.
std::vector<std::vector<int>> numa_node_cpus(const std::string& dir = "/sys/devices/system/node");

// cpu_share within NUMA nodes `nodes`: the allowed CPUs grouped by node (a CPU of no node in a
// group of its own, last). With as many ranks as groups or more, rank r takes group
// r · groups / local_world and its share of it among the ranks that take that group (cpu_share);
// with fewer ranks, the groups from r · groups / local_world up to the next rank's. One group (or
// none given): cpu_share itself.
std::vector<int> numa_cpu_share(const std::vector<int>& cpus, const std::vector<std::vector<int>>& nodes,
                                int local_rank, int local_world);

// "0-3,8,10-11" as its CPUs, ascending. Throws std::invalid_argument naming the text when it is
// not such a list.
std::vector<int> parse_cpu_list(const std::string& text);

// Restricts every thread of this process to `cpus` (threads started later inherit it). Throws
// std::system_error naming the CPUs when the kernel refuses.
void bind_process_to_cpus(const std::vector<int>& cpus);

// The CPUs as ranges: "0-3,8,10-11".
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace cohort::core::proc

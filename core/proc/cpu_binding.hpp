// A rank's share of the CPUs its process may use (scaling.bind_cores_to_rank), as DeepSpeed's
// launcher binds each local rank to cores of its own: the allowed CPUs split into local_world
// contiguous parts in order, the first (count % local_world) parts one CPU larger. Binding is of
// the whole process: every thread it has, and every thread those start afterwards.
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

// Restricts every thread of this process to `cpus` (threads started later inherit it). Throws
// std::system_error naming the CPUs when the kernel refuses.
void bind_process_to_cpus(const std::vector<int>& cpus);

// The CPUs as ranges: "0-3,8,10-11".
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace cohort::core::proc

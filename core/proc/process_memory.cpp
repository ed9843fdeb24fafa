// resident_bytes: see process_memory.hpp.
#include "core/proc/process_memory.hpp"

#include <unistd.h>

#include <fstream>
#include <string>

namespace cohort::core::proc {

std::optional<std::uint64_t> resident_bytes(pid_t pid) {
  std::ifstream statm("/proc/" + std::to_string(pid) + "/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return std::nullopt;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace cohort::core::proc

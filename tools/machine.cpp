// Machine defaults and environment fallbacks for the tools (see machine.hpp).
#include "tools/machine.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace cohort::tools {

double machine_cpus() { return std::max(1u, std::thread::hardware_concurrency()); }

double machine_memory_bytes() {
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

}  // namespace cohort::tools

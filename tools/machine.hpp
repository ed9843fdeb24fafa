// What the tools read from the machine and the environment: this machine's CPUs and memory (the
// default resources of a node), and options that fall back to environment variables.
#pragma once

#include <string>

namespace cohort::tools {

double machine_cpus();          // at least 1
double machine_memory_bytes();  // physical memory
// The variable's value, or fallback when it is unset or empty.
std::string env_or(const char* name, const std::string& fallback);

}  // namespace cohort::tools

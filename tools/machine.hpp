// What the tools read from the machine and the environment: this machine's CPUs, memory and GPUs
// (the default resources of a node), and options that fall back to environment variables.
#pragma once

#include <optional>
#include <string>

#include "actors/messages.hpp"
#include "core/resources/gpu_discovery.hpp"

namespace cohort::tools {

double machine_cpus();          // at least 1
double machine_memory_bytes();  // physical memory
// The variable's value, or fallback when it is unset or empty.
std::string env_or(const char* name, const std::string& fallback);

// The GPUs a node on this machine offers: discovered through NVML (CUDA_VISIBLE_DEVICES
// honoured), the first `requested` when given. Throws core::resources::resource_error naming
// `flag` and both numbers when more are requested than found (a usage error: exit 2).
core::resources::gpu_discovery machine_gpu_offer(std::optional<double> requested, const std::string& flag);
// Writes an offer into a node's record: resources "GPU" and "accelerator_type:<model>" = 1 (one
// tag per model), accelerator_type, gpu_memory_bytes (the smallest GPU's), gpu_ids, gpu_note.
void add_gpu_offer(actors::node_info& info, const core::resources::gpu_discovery& offer);

}  // namespace cohort::tools

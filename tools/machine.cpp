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

core::resources::gpu_discovery machine_gpu_offer(std::optional<double> requested,
                                                 const std::string& flag) {
  return core::resources::choose_gpu_offer(core::resources::discover_gpus(), requested,
                                           core::resources::cuda_build(), flag);
}

void add_gpu_offer(actors::node_info& info, const core::resources::gpu_discovery& offer) {
  info.gpu_note = offer.note;
  if (offer.devices.empty()) return;
  info.resources["GPU"] = static_cast<double>(offer.devices.size());
  info.gpu_memory_bytes = offer.devices.front().memory_bytes;
  for (const auto& d : offer.devices) {
    info.gpu_memory_bytes = std::min(info.gpu_memory_bytes, d.memory_bytes);
    info.gpu_ids.push_back(d.visible_id());
    if (const auto tag = core::resources::accelerator_type_tag(d.name); !tag.empty())
      info.resources[tag] = 1;
    if (info.accelerator_type.find(d.name) == std::string::npos)
      info.accelerator_type += (info.accelerator_type.empty() ? "" : ", ") + d.name;
  }
}

}  // namespace cohort::tools

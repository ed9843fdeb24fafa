// NVML through dlopen, and CUDA_VISIBLE_DEVICES (see gpu_discovery.hpp).
#include "core/resources/gpu_discovery.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

namespace cohort::core::resources {
namespace {

// The few NVML declarations used (nvml.h, stable since NVML 11).
using nvml_return = int;
constexpr nvml_return nvml_success = 0;
using nvml_device = void*;
struct nvml_pci_info {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct nvml_memory {
  unsigned long long total, free, used;
};

// The loaded library and its entry points; closes it (after nvmlShutdown) when done.
class nvml_session {
 public:
  explicit nvml_session(const std::string& library) {
    handle_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      note_ = "no NVIDIA driver: " + library + " cannot be loaded";
      return;
    }
    const bool all = bind(init_, "nvmlInit_v2") && bind(shutdown_, "nvmlShutdown") &&
                     bind(error_string_, "nvmlErrorString") &&
                     bind(count_, "nvmlDeviceGetCount_v2") &&
                     bind(by_index_, "nvmlDeviceGetHandleByIndex_v2") &&
                     bind(name_, "nvmlDeviceGetName") && bind(uuid_, "nvmlDeviceGetUUID") &&
                     bind(pci_, "nvmlDeviceGetPciInfo_v3") &&
                     bind(memory_, "nvmlDeviceGetMemoryInfo");
    if (!all) return;
    const nvml_return r = init_();
    if (r != nvml_success) {
      note_ = "nvmlInit_v2 failed: " + error(r);
      return;
    }
    initialised_ = true;
  }
  ~nvml_session() {
    if (initialised_) shutdown_();
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  nvml_session(const nvml_session&) = delete;
  nvml_session& operator=(const nvml_session&) = delete;

  bool ready() const { return initialised_; }
  const std::string& note() const { return note_; }

  // Every device, or nullopt with note() set when a query fails.
  std::optional<std::vector<gpu_device>> devices() {
    unsigned count = 0;
    if (!check(count_(&count), "nvmlDeviceGetCount_v2")) return std::nullopt;
    std::vector<gpu_device> out;
    for (unsigned i = 0; i < count; ++i) {
      nvml_device dev = nullptr;
      char name[96] = {};
      char uuid[96] = {};
      nvml_pci_info pci{};
      nvml_memory mem{};
      const std::string at = " (GPU " + std::to_string(i) + ")";
      if (!check(by_index_(i, &dev), "nvmlDeviceGetHandleByIndex_v2" + at) ||
          !check(name_(dev, name, sizeof name), "nvmlDeviceGetName" + at) ||
          !check(uuid_(dev, uuid, sizeof uuid), "nvmlDeviceGetUUID" + at) ||
          !check(pci_(dev, &pci), "nvmlDeviceGetPciInfo_v3" + at) ||
          !check(memory_(dev, &mem), "nvmlDeviceGetMemoryInfo" + at))
        return std::nullopt;
      name[sizeof name - 1] = uuid[sizeof uuid - 1] = pci.bus_id[sizeof pci.bus_id - 1] = '\0';
      out.push_back(gpu_device{i, name, uuid, pci.bus_id, static_cast<std::int64_t>(mem.total)});
    }
    return out;
  }

 private:
  template <class F>
  bool bind(F*& fn, const char* symbol) {
    ::dlerror();
    fn = reinterpret_cast<F*>(::dlsym(handle_, symbol));
    if (fn == nullptr) note_ = std::string("NVML lacks ") + symbol + ": update the NVIDIA driver";
    return fn != nullptr;
  }
  std::string error(nvml_return r) const {
    const char* text = error_string_ ? error_string_(r) : nullptr;
    return (text ? std::string(text) : "error") + " (NVML code " + std::to_string(r) + ")";
  }
  bool check(nvml_return r, const std::string& call) {
    if (r == nvml_success) return true;
    note_ = call + " failed: " + error(r);
    return false;
  }

  void* handle_ = nullptr;
  bool initialised_ = false;
  std::string note_;
  nvml_return (*init_)() = nullptr;
  nvml_return (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvml_return) = nullptr;
  nvml_return (*count_)(unsigned*) = nullptr;
  nvml_return (*by_index_)(unsigned, nvml_device*) = nullptr;
  nvml_return (*name_)(nvml_device, char*, unsigned) = nullptr;
  nvml_return (*uuid_)(nvml_device, char*, unsigned) = nullptr;
  nvml_return (*pci_)(nvml_device, nvml_pci_info*) = nullptr;
  nvml_return (*memory_)(nvml_device, nvml_memory*) = nullptr;
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// The device an entry of CUDA_VISIBLE_DEVICES names, or nullptr.
const gpu_device* named_by(const std::vector<gpu_device>& all, const std::string& entry) {
  if (all_digits(entry)) {
    if (entry.size() > 9) return nullptr;
    const unsigned index = static_cast<unsigned>(std::stoul(entry));
    for (const auto& d : all)
      if (d.index == index) return &d;
    return nullptr;
  }
  if (entry.rfind("GPU-", 0) != 0) return nullptr;  // MIG-…, garbage, -1
  const gpu_device* found = nullptr;
  for (const auto& d : all) {
    if (d.uuid.rfind(entry, 0) != 0) continue;
    if (found != nullptr) return nullptr;  // an ambiguous prefix names none
    found = &d;
  }
  return found;
}

}  // namespace

std::vector<gpu_device> select_visible(const std::vector<gpu_device>& all,
                                       const std::optional<std::string>& visible) {
  if (!visible) return all;
  std::vector<gpu_device> out;
  std::set<unsigned> taken;
  std::string::size_type start = 0;
  const std::string& text = *visible;
  while (start <= text.size()) {
    const auto end = std::min(text.find(',', start), text.size());
    const std::string entry = trim(text.substr(start, end - start));
    const gpu_device* d = named_by(all, entry);
    if (d == nullptr) break;
    if (taken.insert(d->index).second) out.push_back(*d);
    start = end + 1;
  }
  return out;
}

gpu_discovery discover_gpus(const std::string& library) {
  gpu_discovery out;
  nvml_session nvml(library);
  if (!nvml.ready()) {
    out.note = nvml.note();
    return out;
  }
  auto all = nvml.devices();
  if (!all) {
    out.note = nvml.note();
    return out;
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  out.devices = select_visible(*all, visible ? std::optional<std::string>(visible) : std::nullopt);
  if (out.devices.empty())
    out.note = all->empty() ? "NVML reports no GPUs"
                            : "CUDA_VISIBLE_DEVICES=\"" + std::string(visible ? visible : "") +
                                  "\" names none of the " + std::to_string(all->size()) + " GPUs";
  return out;
}

std::string accelerator_type_tag(const std::string& model) {
  if (model.empty()) return "";
  std::string tag = model;
  for (char& c : tag)  // resource names allow [A-Za-z0-9_.:/-]
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '/') c = '_';
  return "accelerator_type:" + tag;
}

std::string describe_gpus(const std::vector<gpu_device>& devices) {
  std::string text = std::to_string(devices.size()) + (devices.size() == 1 ? " GPU" : " GPUs");
  std::set<std::string> seen;
  std::string models;
  for (const auto& d : devices)
    if (seen.insert(d.name).second) models += (models.empty() ? "" : ", ") + d.name;
  return models.empty() ? text : text + " (" + models + ")";
}

gpu_discovery choose_gpu_offer(const gpu_discovery& found, std::optional<double> requested,
                               bool cuda, const std::string& flag) {
  if (requested) {
    const std::string given = format_quantity(*requested);
    if (*requested < 0 || *requested != std::floor(*requested) || *requested > 1e6)
      throw resource_error(flag + " " + given + ": expected a whole number of GPUs >= 0");
    const auto want = static_cast<std::size_t>(*requested);
    if (want > 0 && !cuda) throw resource_error(flag + " " + given + ": " + no_cuda_text);
    if (want > found.devices.size())
      throw resource_error(flag + " " + given + ": this machine has " +
                           describe_gpus(found.devices) +
                           (found.note.empty() ? "" : " (" + found.note + ")"));
    gpu_discovery out{std::vector<gpu_device>(found.devices.begin(),
                                              found.devices.begin() + static_cast<long>(want)),
                      ""};
    if (want == 0) out.note = flag + " 0";
    return out;
  }
  if (!cuda)
    return gpu_discovery{{}, found.devices.empty()
                                 ? std::string(no_cuda_text)
                                 : std::string(no_cuda_text) + "; " + describe_gpus(found.devices) +
                                       " found but not offered"};
  return found;
}

bool cuda_build() {
#ifdef COHORT_HAS_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace cohort::core::resources

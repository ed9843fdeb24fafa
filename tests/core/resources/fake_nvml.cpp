// A stand-in for libnvidia-ml.so.1 for the GPU discovery tests on machines without a GPU: the
// NVML entry points gpu_discovery uses, answering from $FAKE_NVML_DEVICES
// ("name|uuid|bus id|bytes;..."). FAKE_NVML_FAIL=init makes nvmlInit_v2 fail as without a
// driver; FAKE_NVML_FAIL=memory makes nvmlDeviceGetMemoryInfo fail. Loaded with dlopen only.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct fake_device {
  std::string name, uuid, bus_id;
  unsigned long long bytes = 0;
};

struct pci_info {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct memory_info {
  unsigned long long total, free, used;
};

constexpr int success = 0;
constexpr int invalid_argument = 2;
constexpr int driver_not_loaded = 9;
constexpr int unknown = 999;

std::vector<fake_device> devices() {
  std::vector<fake_device> out;
  const char* spec = std::getenv("FAKE_NVML_DEVICES");
  std::stringstream all(spec ? spec : "");
  for (std::string one; std::getline(all, one, ';');) {
    std::stringstream fields(one);
    fake_device d;
    std::string bytes;
    std::getline(fields, d.name, '|');
    std::getline(fields, d.uuid, '|');
    std::getline(fields, d.bus_id, '|');
    std::getline(fields, bytes, '|');
    d.bytes = std::strtoull(bytes.c_str(), nullptr, 10);
    out.push_back(d);
  }
  return out;
}

bool failing(const char* what) {
  const char* fail = std::getenv("FAKE_NVML_FAIL");
  return fail != nullptr && std::strcmp(fail, what) == 0;
}

// A handle is the device's index + 1, so that index 0 is not a null handle.
int index_of(void* handle) { return static_cast<int>(reinterpret_cast<std::intptr_t>(handle)) - 1; }

int copy(const std::string& text, char* out, unsigned length) {
  if (text.size() + 1 > length) return invalid_argument;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return success;
}

}  // namespace

extern "C" {

int nvmlInit_v2() { return failing("init") ? driver_not_loaded : success; }
int nvmlShutdown() { return success; }
const char* nvmlErrorString(int result) {
  return result == driver_not_loaded ? "Driver Not Loaded" : result == unknown ? "Unknown Error" : "error";
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = static_cast<unsigned>(devices().size());
  return success;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** handle) {
  if (index >= devices().size()) return invalid_argument;
  *handle = reinterpret_cast<void*>(static_cast<std::intptr_t>(index) + 1);
  return success;
}
int nvmlDeviceGetName(void* handle, char* name, unsigned length) {
  return copy(devices().at(static_cast<std::size_t>(index_of(handle))).name, name, length);
}
int nvmlDeviceGetUUID(void* handle, char* uuid, unsigned length) {
  return copy(devices().at(static_cast<std::size_t>(index_of(handle))).uuid, uuid, length);
}
int nvmlDeviceGetPciInfo_v3(void* handle, pci_info* pci) {
  std::memset(pci, 0, sizeof *pci);
  return copy(devices().at(static_cast<std::size_t>(index_of(handle))).bus_id, pci->bus_id,
              sizeof pci->bus_id);
}
int nvmlDeviceGetMemoryInfo(void* handle, memory_info* memory) {
  if (failing("memory")) return unknown;
  memory->total = devices().at(static_cast<std::size_t>(index_of(handle))).bytes;
  memory->free = memory->total;
  memory->used = 0;
  return success;
}

}  // extern "C"

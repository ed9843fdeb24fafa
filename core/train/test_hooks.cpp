// test_pause_point: see test_hooks.hpp.
#include "core/train/test_hooks.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace cohort::core::train {

void test_pause_point(const std::string& name, const std::atomic<bool>* cancelled) {
  const char* dir = std::getenv(test_pause_dir_variable);
  if (dir == nullptr || *dir == '\0') return;
  const std::string arm = std::string(dir) + "/" + name + ".arm";
  if (::access(arm.c_str(), F_OK) != 0) return;
  const std::string paused = std::string(dir) + "/" + name + ".paused";
  {
    const std::string tmp = paused + ".tmp";
    std::ofstream(tmp) << ::getpid() << "\n";
    std::rename(tmp.c_str(), paused.c_str());  // whole, or not there
  }
  while (::access(arm.c_str(), F_OK) == 0) {
    if (cancelled != nullptr && cancelled->load()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

namespace {

bool test_flag_set(const char* variable) {  // VARIABLE=1 in the environment
  const char* value = std::getenv(variable);
  return value != nullptr && std::string(value) == "1";
}

}  // namespace

double test_save_seconds_added() {
  const char* added = std::getenv(test_save_seconds_variable);
  return added == nullptr ? 0 : std::strtod(added, nullptr);
}

bool test_sequential_host_update() { return test_flag_set(test_sequential_host_update_variable); }

bool test_host_param_gathers() { return test_flag_set(test_host_param_gathers_variable); }

bool test_weight_grads_through_autograd() {
  return test_flag_set(test_weight_grads_through_autograd_variable);
}

bool test_gemm_through_aten() { return test_flag_set(test_gemm_through_aten_variable); }
bool test_no_own_gemm() { return test_flag_set(test_no_own_gemm_variable); }
bool test_no_own_rotary() { return test_flag_set(test_no_own_rotary_variable); }

bool test_update_at_step_end() { return test_flag_set(test_update_at_step_end_variable); }

std::optional<std::uint64_t> test_disk_free_bytes() {
  const char* free = std::getenv(test_disk_free_variable);
  if (free == nullptr) return std::nullopt;
  return std::strtoull(free, nullptr, 10);
}

}  // namespace cohort::core::train

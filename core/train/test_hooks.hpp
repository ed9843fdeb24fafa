// Pause points for fault-injection tests (scripts/chaos), reachable only through the worker
// process's environment, never from a job spec (runtime_env refuses COHORT_* names). With
// COHORT_TEST_PAUSE_DIR=DIR set, a process reaching pause point NAME while DIR/NAME.arm exists
// writes its pid to DIR/NAME.paused and waits until the .arm file is removed (or `cancelled` is
// set), so a test can kill it at exactly that point. Without the variable it returns at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace cohort::core::train {

inline constexpr const char* test_pause_dir_variable = "COHORT_TEST_PAUSE_DIR";

void test_pause_point(const std::string& name, const std::atomic<bool>* cancelled = nullptr);

// With COHORT_TEST_SAVE_SECONDS_ADDED=S in the worker process's environment, each checkpoint save
// of the process is recorded as S seconds longer than it took (checkpointer), so that a test
// knows what the emergency-save estimate (emergency_save.hpp) will be. 0 without it.
inline constexpr const char* test_save_seconds_variable = "COHORT_TEST_SAVE_SECONDS_ADDED";
double test_save_seconds_added();

// With COHORT_TEST_SEQUENTIAL_HOST_UPDATE=1 in the worker process's environment, ZeRO-3 with
// offload_param updates on the host inside the step, as before the update overlapped the next
// step (zero_options::overlap_host_update false): the baseline of a measurement of the overlap.
inline constexpr const char* test_sequential_host_update_variable = "COHORT_TEST_SEQUENTIAL_HOST_UPDATE";
bool test_sequential_host_update();

// With COHORT_TEST_HOST_PARAM_GATHERS=1 in the worker process's environment, ZeRO-3 with
// offload_param copies every gather's shard from the host even where the plan keeps some units'
// shards on the GPU (zero_options::param_shard_units_kept_on_device 0): the baseline of a
// measurement.
inline constexpr const char* test_host_param_gathers_variable = "COHORT_TEST_HOST_PARAM_GATHERS";
bool test_host_param_gathers();

// With COHORT_TEST_WEIGHT_GRADS_THROUGH_AUTOGRAD=1 in the worker process's environment, ZeRO-3's
// weight gradients all go through .grad (zero_options::weight_grads_in_buffer false): the
// baseline of a measurement.
inline constexpr const char* test_weight_grads_through_autograd_variable =
    "COHORT_TEST_WEIGHT_GRADS_THROUGH_AUTOGRAD";
bool test_weight_grads_through_autograd();

// With COHORT_TEST_GEMM_THROUGH_ATEN=1 in the worker process's environment, a job keeps ATen's
// GEMMs (model::gemm::set_timed_picks(false), set_own_gemm(false)): the baseline of a measurement.
inline constexpr const char* test_gemm_through_aten_variable = "COHORT_TEST_GEMM_THROUGH_ATEN";
bool test_gemm_through_aten();

// With COHORT_TEST_NO_OWN_GEMM=1 in the worker process's environment, a training job keeps a Llama
// MLP off cohort's own Hopper GEMM (model::gemm::set_own_gemm(false)): the baseline of a
// measurement.
inline constexpr const char* test_no_own_gemm_variable = "COHORT_TEST_NO_OWN_GEMM";
bool test_no_own_gemm();

// With COHORT_TEST_NO_OWN_ROTARY=1 in the worker process's environment, a training job keeps
// attention's q/k/v projection and rotary off cohort's own Hopper GEMM
// (model::gemm::set_own_gemm_rotary(false)), the MLP in it: the baseline of a measurement.
inline constexpr const char* test_no_own_rotary_variable = "COHORT_TEST_NO_OWN_ROTARY";
bool test_no_own_rotary();

// With COHORT_TEST_UPDATE_AT_STEP_END=1 in the worker process's environment, ZeRO-3 on several
// GPUs updates every unit inside the step (zero_options::update_at_next_gather false), as before
// the update moved to the next step's gathers: the baseline of a measurement.
inline constexpr const char* test_update_at_step_end_variable = "COHORT_TEST_UPDATE_AT_STEP_END";
bool test_update_at_step_end();

// With COHORT_TEST_DISK_FREE_BYTES=N in the worker process's environment, a checkpoint save takes
// the file system of the run's directory to have N bytes free (checkpointer), so that a test can
// have a full disk without filling one. nullopt without it.
inline constexpr const char* test_disk_free_variable = "COHORT_TEST_DISK_FREE_BYTES";
std::optional<std::uint64_t> test_disk_free_bytes();

}  // namespace cohort::core::train

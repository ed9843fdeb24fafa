// What passes between a cluster-worker and a worker process it starts: the worker's setup (as
// JSON, in a file of its own named by the environment variable COHORT_WORKER_SETUP_FILE; a job
// spec of up to config::max_spec_bytes does not fit one environment variable, 128 KiB on Linux)
// and the control lines the worker writes to file descriptor 3 (progress reports, heartbeats for
// the trainer's hang detector and its final word, as JSON lines: the JSON views of
// progress_report, rank_heartbeat and worker_finished, net/json_inspector.hpp, with "type"). Plain output on stdout/stderr
// becomes the job's log. No CAF here: the worker process links none.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "core/train/workload.hpp"

namespace cohort::actors {

// The setup file's path; COHORT_WORKER_SETUP (the JSON itself) is read when it is unset, for a
// worker started by hand.
inline constexpr const char* worker_setup_file_variable = "COHORT_WORKER_SETUP_FILE";
inline constexpr const char* worker_setup_variable = "COHORT_WORKER_SETUP";
inline constexpr int worker_control_fd = 3;

// The setup's JSON view (net/json_inspector.hpp).
std::string worker_setup_to_json(const worker_setup& setup);
// Throws std::invalid_argument (net::json_error) naming the missing or mistyped field.
worker_setup worker_setup_from_json(const std::string& text);

// A worker's setup as JSON in a new file of the temporary directory (mode 0600, created by
// mkstemp), for as long as this object lives: the node keeps it while the worker process runs
// and removes it when the process has ended (the worker removes it as soon as it has read it).
// Throws core::store::store_error (io) naming the file when it cannot be written.
class worker_setup_file {
 public:
  explicit worker_setup_file(const worker_setup& setup);
  ~worker_setup_file();
  worker_setup_file(const worker_setup_file&) = delete;
  worker_setup_file& operator=(const worker_setup_file&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The worker's side: the setup from the file named by COHORT_WORKER_SETUP_FILE (removed once
// read), else from COHORT_WORKER_SETUP. Throws std::invalid_argument saying what is missing.
worker_setup read_worker_setup();

// The variables a node adds to (or replaces in) its own environment for a worker process: the
// job's runtime_env.env_vars, COHORT_WORKER_SETUP_FILE = setup_file (the worker_setup_file of
// this setup), and CUDA_VISIBLE_DEVICES naming the worker's GPUs (setup.gpus, indices into the
// node's offered GPUs) by the node's ids for them (node_gpu_ids[i]; "i" where the list is
// shorter) — set empty for a worker without GPUs, so it never touches a GPU another job was given. Throws std::invalid_argument for an index outside
// 0..node_gpu_count-1, and config::spec_error for a spec that does not parse.
std::map<std::string, std::string> worker_environment(const worker_setup& setup,
                                                      const std::string& setup_file,
                                                      const std::vector<std::string>& node_gpu_ids,
                                                      std::int32_t node_gpu_count);

// The workload's view of a worker's setup: spec parsed, place in the group, run directory, the
// store secret decoded. Throws config::spec_error for a spec that does not parse and
// core::comm::comm_error (invalid_argument) for a store secret that is not 64 hex digits.
// Callbacks and the cancel flag are left for the caller.
core::train::worker_context worker_context_for(const worker_setup& setup);

// One control line from a worker process.
struct worker_control {
  enum class kind { progress, finished, heartbeat } type = kind::progress;
  progress_report progress;  // when progress
  std::int64_t step = 0;           // when heartbeat: the last step completed
  double collective_wait_s = -1;   // when heartbeat: seconds waiting in a collective (< 0: not)
  bool ok = false;           // when finished
  std::string reason;        // when finished and !ok
  failure_kind kind = failure_kind::retryable;  // when finished and !ok
};

// The progress report of one logged step of the worker `setup` describes (its job, rank and
// attempt).
progress_report progress_of(const worker_setup& setup, const core::train::step_report& r);
// A progress control line: the report's JSON view (net/json_inspector.hpp) with "type": "progress".
std::string progress_line(const progress_report& report);
// collective_wait_s < 0: not waiting in a collective.
std::string heartbeat_line(std::int64_t step, double collective_wait_s);
std::string finished_line(bool ok, const std::string& reason,
                          failure_kind kind = failure_kind::retryable);
// nullopt for a line that is not a valid control line (it is ignored, never fatal).
std::optional<worker_control> parse_control_line(const std::string& line);

}  // namespace cohort::actors

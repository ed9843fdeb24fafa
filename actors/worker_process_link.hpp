// What passes between a cluster-worker and a worker process it starts: the worker's setup (as
// JSON, in a file of its own named by the environment variable COHORT_WORKER_SETUP_FILE; a job
// spec of up to config::max_spec_bytes does not fit one environment variable, 128 KiB on Linux);
// worker → node, the control lines the worker writes to file descriptor 3 (progress reports,
// heartbeats for the trainer's hang detector and its final word, as JSON lines: the JSON views of
// progress_report, rank_heartbeat and worker_finished, net/json_inspector.hpp, with "type");
// node → worker, the trainer's commands (worker_command: checkpoint, release, preempt, stop) as
// codec frames (net/codec.hpp) on a pipe the worker reads as file descriptor 4, each frame behind
// its length (4 bytes, big-endian). Plain output on stdout/stderr becomes the job's log. The
// worker process links no actor: only CAF's message type, for the codec.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/messages.hpp"
#include "core/train/workload.hpp"

namespace cohort::actors {

// The setup file's path; COHORT_WORKER_SETUP (the JSON itself) is read when it is unset, for a
// worker started by hand.
inline constexpr const char* worker_setup_file_variable = "COHORT_WORKER_SETUP_FILE";
inline constexpr const char* worker_setup_variable = "COHORT_WORKER_SETUP";
inline constexpr int worker_control_fd = 3;   // worker → node: control lines
inline constexpr int worker_command_fd = 4;   // node → worker: command frames

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

// The bytes of one command on the command link: its codec frame's length (4 bytes, big-endian),
// then the frame ([protocol_version, type_id, body], the link's codec: worker_command only).
std::string command_frame(const worker_command& command);

// Reassembles commands from the bytes read off the command link, in any pieces. Not
// thread-safe: one per reader.
class command_frame_reader {
 public:
  struct result {
    std::vector<worker_command> commands;  // complete ones, in order
    // Why the link is broken: a frame longer than the codec's limit, or one the codec refused
    // (its frame_error and detail). The bytes after it are never read.
    std::optional<std::string> error;
  };
  // Never throws. After an error, every later call returns it again and nothing more.
  result feed(const char* data, std::size_t size) noexcept;

 private:
  std::string pending_;
  std::optional<std::string> error_;
};

// Sets what `command` says in `signals` (the largest count told wins: a command told twice
// changes nothing). Never throws.
void apply_command(const worker_command& command, core::train::run_signals& signals) noexcept;

// The worker's side of the command link: a thread that reads frames from `fd` (owned: closed by
// the destructor) and applies each to `signals` until the link ends, then calls `on_end` once on
// that thread: with nullopt when the node closed its end (or `fd` was not open), with the reason
// when a frame was malformed — the link is then broken and nothing more is read (SIGTERM still
// stops the worker). `signals` must outlive this object; the destructor stops and joins the
// thread (on_end is not called then).
class command_link_reader {
 public:
  command_link_reader(int fd, core::train::run_signals& signals,
                      std::function<void(const std::optional<std::string>& error)> on_end);
  ~command_link_reader();
  command_link_reader(const command_link_reader&) = delete;
  command_link_reader& operator=(const command_link_reader&) = delete;

 private:
  int fd_;
  int wake_[2] = {-1, -1};  // the destructor's way to end a blocked read
  std::thread thread_;
};

}  // namespace cohort::actors

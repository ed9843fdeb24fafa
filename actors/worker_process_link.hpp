// What passes between a cluster-worker and a worker process it starts: the worker's setup, the
// job's parsed spec included (worker_setup's JSON view, actors/job_spec_fields.hpp: the worker
// parses no spec text), in a file of its own named by the environment variable
// COHORT_WORKER_SETUP_FILE (a job spec of up to config::max_spec_bytes does not fit one
// environment variable, 128 KiB on Linux),
// then codec frames (net/codec.hpp) both ways, each behind its length (4 bytes, big-endian), in
// the link's own codec (worker_link_messages, actors/messages.hpp). Each end opens its direction
// with link_hello{worker_link_version}; a reader refuses a direction that opens otherwise:
//   worker → node on file descriptor 3: process_progress, process_heartbeat (for the trainer's
//     hang detector), process_log (the workload's own lines, in order with its reports) and
//     process_finished (its final word). The node's worker actor reassembles them from the bytes
//     as they come; a malformed frame or another version fails that worker (its process is
//     killed and the trainer told why), never the node or the trainer.
//   node → worker on file descriptor 4: the trainer's commands (worker_command: checkpoint,
//     release, preempt, stop), which a reader thread of the worker applies to its run_signals;
//     a worker whose node speaks another version fails before it runs anything.
// Plain output on stdout/stderr (the libraries', a crash's trace) becomes the job's log too, but
// is read on its own pipe: it may reach the trainer after a report written later. The worker
// process links no actor: only CAF's message type, for the codec.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <caf/message.hpp>

#include "actors/messages.hpp"
#include "core/train/workload.hpp"

namespace cohort::actors {

// The setup file's path; COHORT_WORKER_SETUP (the JSON itself) is read when it is unset, for a
// worker started by hand.
inline constexpr const char* worker_setup_file_variable = "COHORT_WORKER_SETUP_FILE";
inline constexpr const char* worker_setup_variable = "COHORT_WORKER_SETUP";
// The version of the link's protocol (link_hello): raised whenever a message of
// worker_link_messages changes meaning or fields.
inline constexpr std::uint32_t worker_link_version = 5;
inline constexpr int worker_report_fd = 3;    // worker → node: process_* frames
inline constexpr int worker_command_fd = 4;   // node → worker: worker_command frames

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
// shorter) — set empty for a worker without GPUs, so it never touches a GPU another job was
// given. Throws std::invalid_argument for an index outside 0..node_gpu_count-1.
std::map<std::string, std::string> worker_environment(const worker_setup& setup,
                                                      const std::string& setup_file,
                                                      const std::vector<std::string>& node_gpu_ids,
                                                      std::int32_t node_gpu_count);

// The workload's view of a worker's setup: its spec, place in the group, run directory, the
// store secret decoded. Throws core::comm::comm_error (invalid_argument) for a store secret that
// is not 64 hex digits.
// Callbacks and the cancel flag are left for the caller.
core::train::worker_context worker_context_for(const worker_setup& setup);

// What a worker process tells its node: process_* for a logged step of `r`.
process_progress progress_of(const core::train::step_report& r);
// What the node's worker actor passes on to the trainer for what its process told it, stamped
// with the job, attempt and rank of `setup` (the process's).
progress_report stamped(const worker_setup& setup, const process_progress& progress);
rank_heartbeat stamped(const worker_setup& setup, const process_heartbeat& beat);

// The bytes of one message on the link: its codec frame's length (4 bytes, big-endian), then the
// frame ([protocol_version, type_id, body], the link's codec: worker_link_messages).
std::string link_frame(const link_hello& hello);
std::string link_frame(const worker_command& command);
std::string link_frame(const process_progress& progress);
std::string link_frame(const process_heartbeat& beat);
std::string link_frame(const process_finished& end);
// The bytes of one or more process_log frames: `text` split at its newlines (as a pipe's reader
// splits plain output) and each line cut, at a UTF-8 boundary, into pieces the link's codec
// carries in one string (16 KiB). Nothing of the text is lost; an empty text is one empty line.
std::string link_frames(const process_log& text);

namespace detail {

// Splits the bytes read off one direction of the link into frames and decodes them, in any
// pieces; the first frame must be link_hello of worker_link_version (taken here, not handed on).
// The first bad frame (longer than the codec's limit, refused by the codec, a first frame that is
// not that hello, or a message this direction does not carry) breaks it for good: the bytes
// after it are never read.
class link_frames {
 public:
  // Hands each complete frame's message to `take` in order; `take` returns false for a message
  // this direction does not carry. Returns why the link is broken, every time once it is (an
  // exception out of `take`, say out of memory, breaks it too).
  std::optional<std::string> feed(const char* data, std::size_t size,
                                  const std::function<bool(const caf::message&)>& take) noexcept;
  // Whether the peer's link_hello has been read (and had this end's version).
  bool opened() const noexcept { return opened_; }

 private:
  std::string pending_;
  bool opened_ = false;
  std::optional<std::string> error_;
};

}  // namespace detail

// Reassembles commands from the bytes the worker reads off fd 4, in any pieces. Not thread-safe:
// one per reader.
class command_frame_reader {
 public:
  struct result {
    std::vector<worker_command> commands;  // complete ones, in order
    // Why the link is broken: a frame longer than the codec's limit, one the codec refused (its
    // frame_error and detail), a first frame that is not link_hello of this version, or a later
    // one that is not a worker_command. The bytes after it are never read.
    std::optional<std::string> error;
  };
  // Never throws. After an error, every later call returns it again and nothing more.
  result feed(const char* data, std::size_t size) noexcept;
  // Whether the node's link_hello has been read.
  bool opened() const noexcept { return frames_.opened(); }

 private:
  detail::link_frames frames_;
};

// One message from a worker process.
using process_message = std::variant<process_progress, process_heartbeat, process_log, process_finished>;

// Reassembles a worker process's messages from the bytes its node reads off fd 3, in any pieces.
// Not thread-safe: one per reader.
class process_frame_reader {
 public:
  struct result {
    std::vector<process_message> messages;  // complete ones, in order
    // Why the link is broken: as for command_frame_reader, with a frame that is not one of the
    // process_* messages (after the hello). The bytes after it are never read.
    std::optional<std::string> error;
  };
  // Never throws. After an error, every later call returns it again and nothing more.
  result feed(const char* data, std::size_t size) noexcept;

 private:
  detail::link_frames frames_;
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

  // Blocks until the node's link_hello has been read (nullopt), or the link broke before it
  // (the reason: a node of another version names both), or the node closed its end without one
  // (nullopt: no link, as for a worker started by hand). The node writes its hello as it starts
  // the process, so this does not wait long.
  std::optional<std::string> wait_for_hello();

 private:
  void settle(const std::optional<std::string>& error);

  int fd_;
  int wake_[2] = {-1, -1};  // the destructor's way to end a blocked read
  std::mutex mutex_;        // guards the two below
  std::condition_variable opened_or_ended_;
  bool settled_ = false;    // the hello was read, or the link ended or broke first
  std::optional<std::string> opening_error_;
  std::thread thread_;
};

}  // namespace cohort::actors

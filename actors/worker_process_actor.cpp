// The node-side actor of a worker that runs in its own OS process (cluster-worker). It starts
// the process, relays its output and what it reports on its link (progress, heartbeats, the
// workload's lines, its final word) to the trainer, passes the trainer's commands
// (worker_command, stop_attempt) on to the process as frames on its command link, and reports how
// it ended — including a crash, kill -9 or a broken link (a malformed frame, another version),
// each of which takes only this worker.
// A job that names scaling.resources_per_worker.memory has its process held to it: the actor
// reads the process's resident memory every memory_watch_every and kills a process past the
// limit, reporting the limit and what it held.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <optional>
#include <variant>

#include <caf/all.hpp>

#include "actors/worker_process_actor.hpp"
#include "actors/worker_process_link.hpp"
#include "core/proc/child_process.hpp"
#include "core/proc/process_memory.hpp"

namespace cohort::actors {

namespace {

// Events from the child's reader thread.
struct child_output {
  std::string line;
};
struct child_report_bytes {
  std::string bytes;
};
struct child_exit {
  core::proc::exit_status status;
};
struct memory_watch {};

}  // namespace
}  // namespace cohort::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::child_output)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::child_report_bytes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::child_exit)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::memory_watch)

namespace cohort::actors {

namespace {

constexpr std::size_t crash_report_lines = 8;    // lines of output before the crash
constexpr std::size_t crash_trace_lines = 64;    // frames of the native stack trace
const std::string fatal_marker = "cohort-worker: fatal signal ";
const std::string trace_end = "cohort-worker: end of stack trace";
constexpr auto memory_watch_every = std::chrono::milliseconds(100);

struct worker_process_state {
  worker_setup setup;
  caf::actor trainer;
  std::unique_ptr<worker_setup_file> setup_file;  // removed when this actor ends
  std::unique_ptr<core::proc::child_process> child;
  std::int64_t pid = 0;         // the child's
  process_frame_reader frames;  // what the process reports on fd 3
  // Why its report link broke (a malformed frame, another version): the process is killed, and
  // this is the reason told.
  std::optional<std::string> link_error;
  bool finished_ok = false;
  std::string failure;  // the worker's own account of its failure, if it gave one
  failure_kind reported_kind = failure_kind::retryable;  // and its kind
  // For the crash report: the last lines of output before a fatal signal's marker, and the
  // native stack trace the process wrote after it (see cohort_worker_main.cpp).
  std::deque<std::string> last_lines;
  std::vector<std::string> stack_trace;
  bool in_trace = false;
  // scaling.resources_per_worker.memory (bytes; 0: not held), the largest resident set read, and
  // why the process was killed for it.
  double memory_limit = 0;
  std::uint64_t memory_peak = 0;
  std::optional<std::string> memory_error;
  static inline const char* name = "cohort.worker_process";
};
using wp_ptr = caf::stateful_actor<worker_process_state>*;

std::string gib_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// A line of the job's log from the process: to the trainer, and kept among the last lines for a
// crash report.
void pass_on_line(wp_ptr self, const std::string& line) {
  auto& st = self->state;
  st.last_lines.push_back(line);
  if (st.last_lines.size() > crash_report_lines) st.last_lines.pop_front();
  self->send(st.trainer, log_line{st.setup.job_id, st.setup.rank, st.setup.node, st.pid, line});
}

// A line of the process's plain output: passed on; from a fatal signal's marker on, the native
// stack trace, kept for the crash report apart from the last lines.
void on_output(wp_ptr self, const child_output& out) {
  auto& st = self->state;
  if (out.line.rfind(fatal_marker, 0) == 0) st.in_trace = true;
  if (!st.in_trace) return pass_on_line(self, out.line);
  if (st.stack_trace.size() < crash_trace_lines && out.line != trace_end) st.stack_trace.push_back(out.line);
  self->send(st.trainer, log_line{st.setup.job_id, st.setup.rank, st.setup.node, st.pid, out.line});
}

// What the process reports on its link: progress, heartbeats and its logged lines on to the
// trainer (in the order written), its own account of how it ended kept. A process that does not
// speak the link's protocol (or not this version of it) fails (retryable, as a crash), and
// nothing it says from there on is believed.
void on_report_bytes(wp_ptr self, const child_report_bytes& in) {
  auto& st = self->state;
  if (st.link_error) return;
  auto got = st.frames.feed(in.bytes.data(), in.bytes.size());
  for (const auto& message : got.messages) {
    if (const auto* p = std::get_if<process_progress>(&message)) {
      self->send(st.trainer, stamped(st.setup, *p));
    } else if (const auto* beat = std::get_if<process_heartbeat>(&message)) {
      self->send(st.trainer, stamped(st.setup, *beat));
    } else if (const auto* logged = std::get_if<process_log>(&message)) {
      pass_on_line(self, logged->line);
    } else if (const auto* end = std::get_if<process_finished>(&message)) {
      st.finished_ok = end->ok;
      st.failure = end->reason;
      st.reported_kind = end->kind;
    }
  }
  if (!got.error) return;
  st.link_error = "worker process " + std::to_string(st.pid) + " of rank " + std::to_string(st.setup.rank) +
                  " on node " + st.setup.node + " broke its report link (fd " +
                  std::to_string(worker_report_fd) + "): " + *got.error + "; the process was killed";
  st.child->signal(SIGKILL);
}

// scaling.resources_per_worker.memory: the process's resident memory, read every
// memory_watch_every; over the limit, it is killed.
void on_memory_watch(wp_ptr self) {
  auto& st = self->state;
  if (st.memory_error) return;
  const auto rss = core::proc::resident_bytes(static_cast<pid_t>(st.pid));
  if (!rss) return;  // gone: its exit tells the rest
  st.memory_peak = std::max(st.memory_peak, *rss);
  if (static_cast<double>(*rss) > st.memory_limit) {
    st.memory_error = "rank " + std::to_string(st.setup.rank) + " on node " + st.setup.node + " (pid " +
                      std::to_string(st.pid) + ") held " + gib_text(static_cast<double>(*rss)) +
                      " of host memory, over its scaling.resources_per_worker.memory of " +
                      gib_text(st.memory_limit) +
                      " (the node's watch of its resident memory); the process was killed";
    st.child->signal(SIGKILL);
    return;
  }
  self->delayed_send(self, memory_watch_every, memory_watch{});
}

// A process that died without its own account leaves a crash report: its last lines of output
// and its native stack trace.
std::string crash_report(const worker_process_state& st, const core::proc::exit_status& status) {
  std::string report = "last lines of its output:";
  if (st.last_lines.empty()) report += " (none)";
  for (const auto& line : st.last_lines) report += "\n  " + line;
  if (!st.stack_trace.empty()) {
    report += "\nnative stack trace:";
    for (const auto& line : st.stack_trace) report += "\n  " + line;
  } else if (status.signaled) {
    report += "\nno native stack trace (signal " + std::to_string(status.signal) +
              " cannot be caught, or the process died before it could write one)";
  }
  return report;
}

// The process ended: how, told to the trainer. Only the worker's own account can say bad input;
// a crash is always retryable.
void on_exit(wp_ptr self, const child_exit& ended) {
  auto& st = self->state;
  const auto& s = st.setup;
  if (st.memory_limit > 0)  // what the watch saw, to size the limit by
    self->send(st.trainer,
               log_line{s.job_id, s.rank, s.node, st.pid,
                        "worker process " + std::to_string(st.pid) + ": resident memory at most " +
                            gib_text(static_cast<double>(st.memory_peak)) + " of its limit " +
                            gib_text(st.memory_limit) + " (read every " +
                            std::to_string(memory_watch_every.count()) + " ms)"});
  if (const auto& why = st.link_error ? st.link_error : st.memory_error) {
    self->send(st.trainer,
               worker_finished{s.job_id, s.attempt, s.rank, false, *why, failure_kind::retryable});
    self->quit(caf::make_error(caf::sec::runtime_error, *why));
    return;
  }
  const bool ok = st.finished_ok && ended.status.success();
  const std::string reason = ok ? ""
                             : !st.failure.empty()
                                 ? st.failure
                                 : "worker process " + std::to_string(st.pid) + " " + ended.status.describe();
  const auto kind = !ok && !st.failure.empty() ? st.reported_kind : failure_kind::retryable;
  const std::string report = !ok && st.failure.empty() ? crash_report(st, ended.status) : "";
  self->send(st.trainer, worker_finished{s.job_id, s.attempt, s.rank, ok, reason, kind, report});
  if (ok)
    self->quit();
  else
    self->quit(caf::make_error(caf::sec::runtime_error, reason));
}

// A command of the trainer over the process's command link; a stop that cannot be written
// becomes SIGTERM, another command is logged as lost.
void on_command(wp_ptr self, const worker_command& cmd) {
  auto& st = self->state;
  if (cmd.job_id != st.setup.job_id || cmd.attempt != st.setup.attempt) return;
  if (st.child->write_commands(link_frame(cmd))) return;
  if (cmd.kind == worker_command_kind::stop) {
    st.child->signal(SIGTERM);
    return;
  }
  const auto& s = st.setup;
  self->send(st.trainer, log_line{s.job_id, s.rank, s.node, st.pid,
                                  std::string("worker process ") + std::to_string(st.pid) +
                                      ": its command link is broken; the " + to_string(cmd.kind) +
                                      " command did not reach it"});
}

// Starts the process with the setup file and the link; false (the failure told) when it cannot.
bool start_process(wp_ptr self, const std::string& program, const std::vector<std::string>& gpu_ids,
                   std::int32_t gpu_count) {
  auto& st = self->state;
  const auto& setup = st.setup;
  auto me = caf::actor_cast<caf::actor>(self);
  try {
    st.setup_file = std::make_unique<worker_setup_file>(setup);
    st.child = std::make_unique<core::proc::child_process>(
        std::vector<std::string>{program, "--rank", std::to_string(setup.rank)},
        worker_environment(setup, st.setup_file->path(), gpu_ids, gpu_count),
        [me](const std::string& line) { caf::anon_send(me, child_output{line}); },
        [me](const core::proc::exit_status& s) { caf::anon_send(me, child_exit{s}); },
        [me](const std::string& bytes) { caf::anon_send(me, child_report_bytes{bytes}); },
        /*command_pipe=*/true);
  } catch (const std::exception& e) {
    self->send(st.trainer, worker_started{setup.job_id, setup.attempt, setup.rank, 0});
    self->send(st.trainer, worker_finished{setup.job_id, setup.attempt, setup.rank, false,
                                           std::string("cannot start the worker process: ") + e.what()});
    self->quit(caf::make_error(caf::sec::runtime_error, e.what()));
    return false;
  }
  st.pid = static_cast<std::int64_t>(st.child->pid());
  // The link's first frame down. Should it not be written (the process is already gone), its exit
  // tells the rest.
  st.child->write_commands(link_frame(link_hello{worker_link_version}));
  self->send(st.trainer, worker_started{setup.job_id, setup.attempt, setup.rank, st.pid});
  if (auto it = setup.spec.scaling.resources_per_worker.find("memory");
      it != setup.spec.scaling.resources_per_worker.end() && it->second > 0) {
    st.memory_limit = it->second;
    self->send(self, memory_watch{});
  }
  return true;
}

caf::behavior worker_process(wp_ptr self, worker_setup setup, caf::actor trainer, std::string program,
                             std::vector<std::string> gpu_ids, std::int32_t gpu_count) {
  auto& st = self->state;
  st.setup = std::move(setup);
  st.trainer = trainer;
  self->monitor(trainer);
  self->set_down_handler([=](caf::down_msg& msg) {
    if (msg.source == self->state.trainer.address()) self->quit(caf::exit_reason::user_shutdown);
  });
  if (!start_process(self, program, gpu_ids, gpu_count)) return {};
  return {
      [=](const child_output& out) { on_output(self, out); },
      [=](const child_report_bytes& in) { on_report_bytes(self, in); },
      [=](memory_watch) { on_memory_watch(self); },
      [=](const child_exit& ended) { on_exit(self, ended); },
      [=](const kill_hung_worker& req) {
        auto& st = self->state;
        if (req.job_id != st.setup.job_id || req.attempt != st.setup.attempt) return;
        st.child->signal(SIGKILL);  // a stopped process would leave SIGTERM pending
      },
      [=](const worker_command& cmd) { on_command(self, cmd); },
      [=](const stop_attempt&) {
        // The stop command, else SIGTERM; either way the process ends with this actor (its
        // child_process kills what is left).
        auto& st = self->state;
        if (!st.child->write_commands(
                link_frame(worker_command{st.setup.job_id, st.setup.attempt, worker_command_kind::stop, 0})))
          st.child->signal(SIGTERM);
        self->quit(caf::exit_reason::user_shutdown);
      },
  };
}

}  // namespace

worker_spawner process_workers(std::string program, std::vector<std::string> gpu_ids,
                               std::int32_t gpu_count) {
  return [program, gpu_ids, gpu_count](caf::local_actor* node, const worker_setup& setup,
                                       const caf::actor& trainer) {
    return node->spawn<caf::linked>(worker_process, setup, trainer, program, gpu_ids, gpu_count);
  };
}

}  // namespace cohort::actors

// The node-side actor of a worker that runs in its own OS process (cluster-worker). It starts
// the process, relays its output and what it reports on its link (progress, heartbeats, its final
// word) to the trainer, passes the trainer's commands (worker_command, stop_attempt) on to the
// process as frames on its command link, and reports how it ended — including a crash, kill -9
// or a broken link (a malformed frame, another version), each of which takes only this worker.
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

caf::behavior worker_process(wp_ptr self, worker_setup setup, caf::actor trainer,
                             std::string program, std::vector<std::string> gpu_ids,
                             std::int32_t gpu_count) {
  auto& st = self->state;
  st.setup = setup;
  st.trainer = trainer;
  self->monitor(trainer);
  self->set_down_handler([=](caf::down_msg& msg) {
    if (msg.source == self->state.trainer.address()) self->quit(caf::exit_reason::user_shutdown);
  });
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
    self->send(trainer, worker_started{setup.job_id, setup.attempt, setup.rank, 0});
    self->send(trainer, worker_finished{setup.job_id, setup.attempt, setup.rank, false,
                                        std::string("cannot start the worker process: ") + e.what()});
    self->quit(caf::make_error(caf::sec::runtime_error, e.what()));
    return {};
  }
  const auto pid = static_cast<std::int64_t>(st.child->pid());
  // The link's first frame down. Should it not be written (the process is already gone), its
  // exit tells the rest.
  st.child->write_commands(link_frame(link_hello{worker_link_version}));
  self->send(trainer, worker_started{setup.job_id, setup.attempt, setup.rank, pid});
  if (auto it = setup.spec.scaling.resources_per_worker.find("memory");
      it != setup.spec.scaling.resources_per_worker.end() && it->second > 0) {
    st.memory_limit = it->second;
    self->send(self, memory_watch{});
  }
  return {
      [=](const child_output& out) {
        auto& st = self->state;
        const auto& s = st.setup;
        if (out.line.rfind(fatal_marker, 0) == 0) st.in_trace = true;
        if (st.in_trace) {
          if (st.stack_trace.size() < crash_trace_lines && out.line != trace_end)
            st.stack_trace.push_back(out.line);
        } else {
          st.last_lines.push_back(out.line);
          if (st.last_lines.size() > crash_report_lines) st.last_lines.pop_front();
        }
        self->send(st.trainer, log_line{s.job_id, s.rank, s.node, pid, out.line});
      },
      [=](const child_report_bytes& in) {
        auto& st = self->state;
        if (st.link_error) return;  // nothing after a malformed frame is read
        auto got = st.frames.feed(in.bytes.data(), in.bytes.size());
        for (const auto& message : got.messages) {
          if (const auto* p = std::get_if<process_progress>(&message)) {
            self->send(st.trainer, stamped(st.setup, *p));
          } else if (const auto* beat = std::get_if<process_heartbeat>(&message)) {
            self->send(st.trainer, stamped(st.setup, *beat));
          } else if (const auto* end = std::get_if<process_finished>(&message)) {
            st.finished_ok = end->ok;
            st.failure = end->reason;
            st.reported_kind = end->kind;
          }
        }
        if (got.error) {
          // The process does not speak the link's protocol (or not this version of it): this
          // worker fails (retryable, as a crash), and nothing it says from here on is believed.
          st.link_error = "worker process " + std::to_string(pid) + " of rank " +
                          std::to_string(st.setup.rank) + " on node " + st.setup.node +
                          " broke its report link (fd " + std::to_string(worker_report_fd) +
                          "): " + *got.error + "; the process was killed";
          st.child->signal(SIGKILL);
        }
      },
      [=](memory_watch) {
        auto& st = self->state;
        if (st.memory_error) return;
        const auto rss = core::proc::resident_bytes(static_cast<pid_t>(pid));
        if (!rss) return;  // gone: its exit tells the rest
        st.memory_peak = std::max(st.memory_peak, *rss);
        if (static_cast<double>(*rss) > st.memory_limit) {
          st.memory_error = "rank " + std::to_string(st.setup.rank) + " on node " + st.setup.node + " (pid " +
                            std::to_string(pid) + ") held " + gib_text(static_cast<double>(*rss)) +
                            " of host memory, over its scaling.resources_per_worker.memory of " +
                            gib_text(st.memory_limit) + " (the node's watch of its resident memory); the process "
                            "was killed";
          st.child->signal(SIGKILL);
          return;
        }
        self->delayed_send(self, memory_watch_every, memory_watch{});
      },
      [=](const child_exit& ended) {
        auto& st = self->state;
        const auto& s = st.setup;
        if (st.memory_limit > 0)  // what the watch saw, to size the limit by
          self->send(st.trainer, log_line{s.job_id, s.rank, s.node, pid,
                                          "worker process " + std::to_string(pid) + ": resident memory at most " +
                                              gib_text(static_cast<double>(st.memory_peak)) + " of its limit " +
                                              gib_text(st.memory_limit) + " (read every " +
                                              std::to_string(memory_watch_every.count()) + " ms)"});
        if (const auto& why = st.link_error ? st.link_error : st.memory_error) {
          self->send(st.trainer, worker_finished{s.job_id, s.attempt, s.rank, false, *why, failure_kind::retryable});
          self->quit(caf::make_error(caf::sec::runtime_error, *why));
          return;
        }
        bool ok = st.finished_ok && ended.status.success();
        std::string reason = ok ? "" : !st.failure.empty() ? st.failure
                                                           : "worker process " + std::to_string(pid) +
                                                                 " " + ended.status.describe();
        // Only the worker's own account can say bad input; a crash is always retryable.
        const auto kind = !ok && !st.failure.empty() ? st.reported_kind : failure_kind::retryable;
        // A process that died without its own account leaves a crash report.
        std::string report;
        if (!ok && st.failure.empty()) {
          report = "last lines of its output:";
          if (st.last_lines.empty()) report += " (none)";
          for (const auto& line : st.last_lines) report += "\n  " + line;
          if (!st.stack_trace.empty()) {
            report += "\nnative stack trace:";
            for (const auto& line : st.stack_trace) report += "\n  " + line;
          } else if (ended.status.signaled) {
            report += "\nno native stack trace (signal " + std::to_string(ended.status.signal) +
                      " cannot be caught, or the process died before it could write one)";
          }
        }
        self->send(st.trainer, worker_finished{s.job_id, s.attempt, s.rank, ok, reason, kind, report});
        if (ok)
          self->quit();
        else
          self->quit(caf::make_error(caf::sec::runtime_error, reason));
      },
      [=](const kill_hung_worker& req) {
        auto& st = self->state;
        if (req.job_id != st.setup.job_id || req.attempt != st.setup.attempt) return;
        st.child->signal(SIGKILL);  // a stopped process would leave SIGTERM pending
      },
      [=](const worker_command& cmd) {
        auto& st = self->state;
        if (cmd.job_id != st.setup.job_id || cmd.attempt != st.setup.attempt) return;
        if (st.child->write_commands(link_frame(cmd))) return;
        if (cmd.kind == worker_command_kind::stop) {
          st.child->signal(SIGTERM);  // the fallback
          return;
        }
        const auto& s = st.setup;
        self->send(st.trainer, log_line{s.job_id, s.rank, s.node, pid,
                                        std::string("worker process ") + std::to_string(pid) +
                                            ": its command link is broken; the " +
                                            to_string(cmd.kind) + " command did not reach it"});
      },
      [=](const stop_attempt&) {
        auto& st = self->state;
        // The stop command, else SIGTERM; either way the process ends with this actor (its
        // child_process kills what is left).
        if (!st.child->write_commands(link_frame(worker_command{
                st.setup.job_id, st.setup.attempt, worker_command_kind::stop, 0})))
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

// cohort-worker: one worker of a job, in a process of its own, started by a cluster-worker or by
// cohort-local for `submit --local` (never by hand). It reads its setup, the job's parsed spec
// included, from the file named by COHORT_WORKER_SETUP_FILE (removing it) or from
// COHORT_WORKER_SETUP, runs the job's workload, reports progress, the workload's log lines and
// its final word as codec frames on fd 3 (worker_process_link.hpp; a failure of the job's own
// input at setup as bad input), and writes its other output on stdout and stderr (the job's
// log too).
// Its first line names the GPUs it got (CUDA_VISIBLE_DEVICES, as NVML sees them) and which of the
// job's runtime_env.env_vars it has; a worker whose bundle has GPUs but that sees none fails.
// Each direction of its link opens with link_hello: it writes its own first on fd 3, and a
// command link (fd 4) that does not open with the node's, of this version, fails it before it
// runs anything. A thread reads the trainer's commands from fd 4 (checkpoint, release, preempt,
// stop) into the run's run_signals, which the workload reads between steps; a malformed frame
// later is logged and ends the link. SIGTERM, like the stop command, stops it at the next step.
// Exit: 0 done or stopped, 1 failed, 2 bad setup.
// A thread heartbeats on fd 3 (process_heartbeat: the step reached, how long the rank has
// waited in a collective, and its activity besides steps: rank_activity.hpp) every
// heartbeat_interval_s(run.failure.hang_timeout_s) for the trainer's hang detector. SIGSEGV,
// SIGABRT, SIGBUS, SIGFPE and SIGILL write "cohort-worker: fatal signal …" and a native stack
// trace (backtrace_symbols_fd) to stderr, which the node keeps for the crash report, then end the
// process with the same signal.
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "actors/hang_detector.hpp"
#include "actors/worker_process_link.hpp"
#include "core/comm/collective_wait.hpp"
#include "core/proc/cpu_binding.hpp"
#include "core/proc/open_files.hpp"
#include "core/resources/gpu_discovery.hpp"
#include "core/train/host_threads.hpp"
#include "core/train/workload.hpp"

using namespace cohort;

namespace {

// Written by the command link's thread and SIGTERM (a lock-free atomic store is
// async-signal-safe); read by the workload.
core::train::run_signals signals;
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_sigterm(int) { signals.cancelled.store(true); }

// Async-signal-safe: writes text to stderr.
void write_stderr(const char* text, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<std::size_t>(w);
  }
}

// The fatal signal handler: only async-signal-safe calls (backtrace was called once before, so
// its library is loaded). SA_RESETHAND restored the default action: raising the signal again
// ends the process with it, as the node reports.
extern "C" void on_fatal_signal(int sig) {
  const char* name = sig == SIGSEGV ? "SIGSEGV"
                     : sig == SIGABRT ? "SIGABRT"
                     : sig == SIGBUS  ? "SIGBUS"
                     : sig == SIGFPE  ? "SIGFPE"
                     : sig == SIGILL  ? "SIGILL"
                                      : "signal";
  char line[96] = "cohort-worker: fatal signal ";
  std::size_t n = std::strlen(line);
  char digits[12];
  int d = 0;
  for (int v = sig; v > 0 && d < 11; v /= 10) digits[d++] = static_cast<char>('0' + v % 10);
  while (d > 0) line[n++] = digits[--d];
  line[n++] = ' ';
  line[n++] = '(';
  for (const char* p = name; *p != '\0'; ++p) line[n++] = *p;
  const char tail[] = "); native stack trace:\n";
  for (const char* p = tail; *p != '\0'; ++p) line[n++] = *p;
  write_stderr(line, n);
  // Unwinding takes the loader's lock; should the signal have come while this thread held it,
  // SIGALRM's default action ends the process instead of leaving it hung.
  ::alarm(10);
  void* frames[64];
  const int count = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, count, STDERR_FILENO);
  const char end[] = "cohort-worker: end of stack trace\n";
  write_stderr(end, sizeof end - 1);
  ::raise(sig);
}

void install_crash_handlers() {
  static char alt_stack[64 * 1024];  // a stack overflow still gets its trace
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  ::sigaltstack(&ss, nullptr);
  void* warm[1];
  ::backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) ::sigaction(sig, &sa, nullptr);
}

std::mutex report_mutex;  // the heartbeat thread and the workload both write frames on fd 3

// Bytes of whole frames to the node, written whole.
void write_frames(const std::string& frame) {
  std::lock_guard<std::mutex> lock(report_mutex);
  const char* p = frame.data();
  std::size_t left = frame.size();
  while (left > 0) {
    const ssize_t n = ::write(actors::worker_report_fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the node is gone; nothing left to tell
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// One message to the node.
template <class T>
void report(const T& message) {
  write_frames(actors::link_frame(message));
}

// A logged text to the node: its lines, each a frame.
void report_lines(const actors::process_log& text) { write_frames(actors::link_frames(text)); }

void report_finished(bool ok, const std::string& reason,
                     actors::failure_kind kind = actors::failure_kind::retryable) {
  report(actors::process_finished{ok, reason, kind});
}

// "GPU 0 = GPU-… (NVIDIA H100 80GB HBM3, bus 00000000:19:00.0)", or why there is none.
std::string devices_text(const core::resources::gpu_discovery& found) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (found.devices.empty())
    return std::string("no GPU (CUDA_VISIBLE_DEVICES=") +
           (visible ? "\"" + std::string(visible) + "\"" : std::string("unset")) +
           (found.note.empty() ? "" : "; " + found.note) + ")";
  std::string text;
  for (std::size_t i = 0; i < found.devices.size(); ++i) {
    const auto& d = found.devices[i];
    text += (i == 0 ? "" : ", ") + std::string("GPU ") + std::to_string(i) + " = " + d.uuid + " (" +
            d.name + ", bus " + d.pci_bus_id + ")";
  }
  return text;
}

// The names of the job's runtime_env.env_vars present in this process's environment.
std::string job_env_text(const config::job_spec& spec) {
  std::string names;
  for (const auto& [name, value] : spec.runtime_env.env_vars)
    if (std::getenv(name.c_str()) != nullptr) names += (names.empty() ? "" : " ") + name;
  return names.empty() ? "none" : names;
}

}  // namespace

// Heartbeats on fd 3 every `interval` until stopped (destruction).
class heartbeat_thread {
 public:
  heartbeat_thread(const std::atomic<std::int64_t>& step, const core::train::rank_activity& activity,
                   double interval_s)
      : thread_([this, &step, &activity, interval_s] {
          const auto interval = std::chrono::duration<double>(interval_s);
          std::unique_lock<std::mutex> lock(mutex_);
          while (!stop_) {
            const auto waited = core::comm::collective_wait_seconds();
            report(actors::process_heartbeat{step.load(), waited ? *waited : -1.0,
                                             actors::heartbeat_of(activity.read())});
            cv_.wait_for(lock, interval, [this] { return stop_; });
          }
        }) {}
  ~heartbeat_thread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

namespace {

// A rank that should see GPUs and sees none: why, or "" when it is fine.
std::string missing_gpus(const actors::worker_setup& setup, const core::train::worker_context& ctx,
                         const core::resources::gpu_discovery& found) {
  const auto gpu = ctx.spec.scaling.resources_per_worker.find("GPU");
  const double gpus = gpu == ctx.spec.scaling.resources_per_worker.end() ? 0.0 : gpu->second;
  if ((gpus <= 0 && setup.gpus.empty()) || !found.devices.empty()) return "";
  return "rank " + std::to_string(setup.rank) + " on node " + setup.node +
         ": scaling.resources_per_worker.GPU is " + core::resources::format_quantity(gpus) +
         " but this worker sees " + devices_text(found) +
         "; check the node's NVIDIA driver and CUDA_VISIBLE_DEVICES";
}

// The trainer's commands; none for a worker started without the link (fd 4 not open). Throws
// std::runtime_error when the link of a node of another version does not open.
std::unique_ptr<actors::command_link_reader> open_command_link(const actors::worker_setup& setup) {
  if (::fcntl(actors::worker_command_fd, F_GETFD) < 0) return nullptr;
  auto commands = std::make_unique<actors::command_link_reader>(
      actors::worker_command_fd, signals, [](const std::optional<std::string>& error) {
        if (error)  // the node's end closing is no news: this process dies with the node
          std::cerr << "cohort-worker: the command link broke (" << *error
                    << "); no further command is read, SIGTERM still stops this worker" << std::endl;
      });
  if (const auto broken = commands->wait_for_hello())
    throw std::runtime_error("rank " + std::to_string(setup.rank) + " on node " + setup.node +
                             ": the command link from its node did not open: " + *broken);
  return commands;
}

// Runs the rank's workload and reports how it ended. The exit code.
int run_rank(const actors::worker_setup& setup, core::train::worker_context& ctx) {
  try {
    core::train::make_workload(ctx.spec)->run(ctx);
  } catch (const core::train::cancelled_error&) {
    return 0;
  } catch (const core::train::bad_input_error& e) {
    std::cerr << "worker rank " << setup.rank << " failed on the job's input: " << e.what() << std::endl;
    report_finished(false, e.what(), actors::failure_kind::bad_input);
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "worker rank " << setup.rank << " failed: " << e.what() << std::endl;
    report_finished(false, e.what());
    return 1;
  }
  report_finished(true, "");
  return 0;
}

}  // namespace

// scaling.bind_cores_to_rank: this rank bound to its share of the CPUs the node lets it use, its
// host threads sized to it; what it did for the first log line ("" when the job does not bind).
// Before any thread of the workload starts. Throws std::system_error when the kernel refuses.
std::string bind_cores(const actors::worker_setup& setup) {
  if (!setup.spec.scaling.bind_cores_to_rank) return "";
  const auto allowed = core::proc::allowed_cpus();
  const auto nodes = core::proc::numa_node_cpus();
  const auto cpus = core::proc::numa_cpu_share(allowed, nodes, setup.local_rank, setup.local_world);
  core::proc::bind_process_to_cpus(cpus);
  return "bound to CPUs " + core::proc::cpu_list_text(cpus) + " (local rank " +
         std::to_string(setup.local_rank) + " of " + std::to_string(setup.local_world) + " on " +
         std::to_string(allowed.size()) + " CPUs" +
         (nodes.size() > 1 ? ", " + std::to_string(nodes.size()) + " NUMA nodes" : "") + "), " +
         core::train::size_host_threads(static_cast<int>(cpus.size()));
}

int main(int argc, char** argv) {
  // A peer that went away must show up as EPIPE on its connection, not end this process.
  ::signal(SIGPIPE, SIG_IGN);
  install_crash_handlers();
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << "cohort-worker: started by cluster-worker (or cohort-local) for one rank of a job; reads its "
                 "setup from the file $" << actors::worker_setup_file_variable << " names\n";
    return 0;
  }
  // The report link's first frame, before anything else can fail.
  report(actors::link_hello{actors::worker_link_version});
  const auto files = core::proc::raise_open_files_limit();
  actors::worker_setup setup;
  core::train::worker_context ctx;
  try {
    setup = actors::read_worker_setup();
  } catch (const std::exception& e) {
    std::cerr << "cohort-worker: bad setup: " << e.what() << "\n";
    return 2;
  }
  try {
    ctx = actors::worker_context_for(setup);
  } catch (const std::exception& e) {  // the store secret its trainer gave
    std::cerr << "cohort-worker: bad setup: " << e.what() << "\n";
    report_finished(false, e.what());
    return 2;
  }
  // From here on, for the trainer's hang detector: alive, and the step reached.
  std::atomic<std::int64_t> step_reached{0};
  ctx.step_reached = &step_reached;
  core::train::rank_activity activity;  // saving, exporting, ... with the bytes written
  ctx.activity = &activity;
  heartbeat_thread heartbeat(step_reached, activity,
                             actors::heartbeat_interval_s(ctx.spec.run.failure.hang_timeout_s));
  const auto found = core::resources::discover_gpus();
  std::string bound;
  try {
    bound = bind_cores(setup);
  } catch (const std::exception& e) {
    const std::string reason = "rank " + std::to_string(setup.rank) + " on node " + setup.node +
                               ": scaling.bind_cores_to_rank: " + e.what();
    std::cerr << "cohort-worker: " << reason << std::endl;
    report_finished(false, reason);
    return 1;
  }
  const std::string blas = core::train::match_blas_threads_to_torch();
  std::cout << "cohort-worker: rank " << setup.rank << " of job " << setup.job_id << " on node " << setup.node
            << " (pid " << ::getpid() << "): " << devices_text(found) << (bound.empty() ? "" : "; " + bound)
            << (blas.empty() ? "" : "; " + blas) << "; " << core::proc::describe(files)
            << "; job environment: " << job_env_text(ctx.spec) << std::endl;
  if (auto warning = core::proc::open_files_warning(files.soft, setup.world_size, setup.node))
    std::cerr << "cohort-worker: rank " << setup.rank << ": " << *warning << std::endl;
  if (const std::string reason = missing_gpus(setup, ctx, found); !reason.empty()) {
    std::cerr << "cohort-worker: " << reason << std::endl;
    report_finished(false, reason);
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  ::sigaction(SIGTERM, &sa, nullptr);
  ctx.cancelled = &signals.cancelled;
  ctx.signals = &signals;
  std::unique_ptr<actors::command_link_reader> commands;
  try {  // a node of another version: fail before running anything
    commands = open_command_link(setup);
  } catch (const std::runtime_error& e) {
    report_finished(false, e.what());
    return 1;
  }
  ctx.report = [&](const core::train::step_report& r) { report(actors::progress_of(r)); };
  // The workload's lines go on the link, in order with its reports; a worker started by hand
  // (no link) writes them on stdout.
  if (commands)
    ctx.log = [](const std::string& line) { report_lines(actors::process_log{line}); };
  else
    ctx.log = [](const std::string& line) { std::cout << line << std::endl; };
  return run_rank(setup, ctx);
}

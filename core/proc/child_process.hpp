// A child OS process with its output captured line by line: how a cluster-worker runs each worker
// in a process of its own (a crash, kill -9 or OOM of one takes only that one). The child dies with
// its parent (PR_SET_PDEATHSIG). Besides stdout/stderr the child may write to file descriptor 3
// (the structured channel back to its parent: bytes, which the parent frames as it likes), and,
// when asked for, read what its parent writes with write_commands from file descriptor 4 (the
// other direction on a descriptor of its own: a Unix socket pair used one way, so that a write
// never blocks and never raises SIGPIPE in the parent). One reader thread per child delivers
// output lines and fd 3's bytes, then the exit.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cohort::core::proc {

struct exit_status {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // signal number when signaled
  bool success() const { return !signaled && code == 0; }
  // "exited with code 3" / "killed by signal 9 (SIGKILL)"
  std::string describe() const;
};

class child_process {
 public:
  using line_handler = std::function<void(const std::string& line)>;
  using bytes_handler = std::function<void(const std::string& bytes)>;
  using exit_handler = std::function<void(const exit_status& status)>;

  // Starts argv[0] (a path) with the given arguments; env entries are added to (or replace) the
  // parent's environment. stdout and stderr both arrive, line by line, at on_line; what the
  // child writes to fd 3 arrives at on_control in pieces as read (in order, never empty, split
  // anywhere); on_exit is called once, after the last of both. All run on the reader thread.
  // With `command_pipe`, the child's fd 4 is the read end of a socket pair that write_commands
  // writes to. Throws std::system_error when the process cannot be started.
  child_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                line_handler on_line, exit_handler on_exit, bytes_handler on_control = {},
                bool command_pipe = false);
  // Kills the child (SIGKILL) if it still runs and waits for the reader thread.
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const { return pid_; }
  // Sends a signal; harmless after the child has ended.
  void signal(int sig);
  // Writes `bytes` whole to the child's fd 4 without blocking (a child that reads its commands
  // never lets the socket's buffer fill). False, and nothing more is ever written,
  // when there is no command pipe, the child closed its end or ended, or the bytes did not fit.
  // Called from one thread at a time.
  bool write_commands(const std::string& bytes);

 private:
  pid_t pid_ = -1;
  int command_fd_ = -1;  // the write end of the child's fd 4; -1 without one or once broken
  // Guards reaping against signal(): the pid is never signalled after it was reaped (and could
  // belong to another process).
  std::mutex reap_mutex_;
  bool reaped_ = false;
  std::thread reader_;
};

}  // namespace cohort::core::proc

// Child processes with captured output (see child_process.hpp).
#include "core/proc/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

extern char** environ;

namespace cohort::core::proc {

std::string exit_status::describe() const {
  if (!signaled) return "exited with code " + std::to_string(code);
  const char* name = sigabbrev_np(signal);
  return "killed by signal " + std::to_string(signal) + (name ? " (SIG" + std::string(name) + ")" : "");
}

namespace {

// The environment for the child: the parent's, with `extra` added or replacing.
std::vector<std::string> child_environment(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos && extra.count(entry.substr(0, eq)) != 0) continue;
    out.push_back(entry);
  }
  for (const auto& [k, v] : extra) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

namespace {

// Splits complete lines off `pending` and hands them over.
void emit_lines(std::string& pending, const child_process::line_handler& handler) {
  for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
    if (handler) handler(pending.substr(0, nl));
    pending.erase(0, nl + 1);
  }
}

}  // namespace

child_process::child_process(const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& env, line_handler on_line,
                             exit_handler on_exit, bytes_handler on_control, bool command_pipe) {
  if (argv.empty()) throw std::invalid_argument("child_process: empty argv");
  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  std::vector<std::string> env_strings = child_environment(env);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int fds[2], ctl[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::system_error(errno, std::generic_category(), "pipe for child output");
  if (::pipe2(ctl, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::system_error(err, std::generic_category(), "pipe for the child's fd 3");
  }
  int cmd[2] = {-1, -1};  // created after fds and ctl, so neither end is fd 3 or 4
  // A socket pair, not a pipe: the parent's writes pass MSG_NOSIGNAL (no SIGPIPE in a parent that
  // does not ignore it, when the child is gone) and MSG_DONTWAIT (never blocking the caller).
  if (command_pipe && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, cmd) != 0) {
    int err = errno;
    for (int fd : {fds[0], fds[1], ctl[0], ctl[1]}) ::close(fd);
    throw std::system_error(err, std::generic_category(), "pipe for child commands");
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) {
    int err = errno;
    for (int fd : {fds[0], fds[1], ctl[0], ctl[1], cmd[0], cmd[1]})
      if (fd >= 0) ::close(fd);
    throw std::system_error(err, std::generic_category(), "fork " + argv[0]);
  }
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::dup2(ctl[1], 3);  // dup2 clears close-on-exec on the copy
    if (cmd[0] >= 0) ::dup2(cmd[0], 4);
    ::execve(args[0], args.data(), envp.data());
    const char msg[] = "child_process: exec failed\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(fds[1]);
  ::close(ctl[1]);
  if (cmd[0] >= 0) {
    ::close(cmd[0]);
    ::shutdown(cmd[1], SHUT_RD);  // one direction: parent → child
    command_fd_ = cmd[1];
  }
  const int out_fd = fds[0], ctl_fd = ctl[0];
  const pid_t pid = pid_;
  reader_ = std::thread([this, out_fd, ctl_fd, pid, on_line = std::move(on_line),
                         on_exit = std::move(on_exit), on_control = std::move(on_control)] {
    // Read both pipes until both are closed (the child and its descendants are gone): [0] the
    // output, in lines; [1] fd 3, as read.
    struct channel {
      int fd;
      std::string pending;  // the output's unfinished line
      bool open = true;
    } channels[2] = {{out_fd, {}}, {ctl_fd, {}}};
    char buf[4096];
    while (channels[0].open || channels[1].open) {
      pollfd pfd[2];
      for (int i = 0; i < 2; ++i) pfd[i] = {channels[i].open ? channels[i].fd : -1, POLLIN, 0};
      if (::poll(pfd, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int i = 0; i < 2; ++i) {
        if (!channels[i].open || pfd[i].revents == 0) continue;
        ssize_t n = ::read(channels[i].fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          channels[i].open = false;
          continue;
        }
        if (i == 1) {
          if (on_control) on_control(std::string(buf, static_cast<std::size_t>(n)));
          continue;
        }
        channels[i].pending.append(buf, static_cast<std::size_t>(n));
        emit_lines(channels[i].pending, on_line);
      }
    }
    if (!channels[0].pending.empty() && on_line) on_line(channels[0].pending);
    for (auto& ch : channels) ::close(ch.fd);
    // Wait for the exit without reaping, then reap under the lock that signal() takes.
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
    }
    int status = 0;
    {
      std::lock_guard<std::mutex> lock(reap_mutex_);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      reaped_ = true;
    }
    exit_status st;
    if (WIFSIGNALED(status)) {
      st.signaled = true;
      st.signal = WTERMSIG(status);
    } else {
      st.code = WEXITSTATUS(status);
    }
    if (on_exit) on_exit(st);
  });
}

child_process::~child_process() {
  signal(SIGKILL);
  if (reader_.joinable()) reader_.join();
  if (command_fd_ >= 0) ::close(command_fd_);
}

bool child_process::write_commands(const std::string& bytes) {
  if (command_fd_ < 0) return false;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(command_fd_, bytes.data() + done, bytes.size() - done,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // EPIPE: the child is gone; EAGAIN: it stopped reading. Either way broken.
      ::close(command_fd_);
      command_fd_ = -1;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void child_process::signal(int sig) {
  std::lock_guard<std::mutex> lock(reap_mutex_);
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

}  // namespace cohort::core::proc

// Hosts as network namespaces joined by a bridge (see host_rig.hpp).
#include "tests/cluster/host_rig.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

extern char** environ;

namespace cohort::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* netns_dir = "/run/netns";

// The `ip` program: on PATH, else where Debian puts it.
const std::string& ip_program() {
  static const std::string found = [] {
    std::vector<std::string> dirs;
    if (const char* path = std::getenv("PATH")) {
      std::istringstream in(path);
      for (std::string d; std::getline(in, d, ':');)
        if (!d.empty()) dirs.push_back(d);
    }
    for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.push_back(d);
    for (const auto& d : dirs)
      if (::access((d + "/ip").c_str(), X_OK) == 0) return d + "/ip";
    return std::string();
  }();
  return found;
}

// Runs argv (argv[0] a path) to its end with env added to this process's environment; stdout and
// stderr kept apart. Kills it (SIGKILL) and throws when it has not ended within `limit`.
command_result run_program(const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& env, std::chrono::milliseconds limit) {
  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (env.count(entry.substr(0, entry.find('='))) == 0) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe: " + std::string(std::strerror(errno)));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw std::runtime_error("pipe: " + std::string(std::strerror(errno)));
  }
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork " + argv[0] + ": " + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execve(args[0], args.data(), envp.data());
    const char msg[] = "exec failed\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  command_result result;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* into[2] = {&result.out, &result.err};
  bool timed_out = false;
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const auto n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        into[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    throw std::runtime_error(cmd + " did not end within " + std::to_string(limit.count() / 1000) + " s");
  }
  result.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  return result;
}

// The (device, inode) of a network namespace file; {0, 0} when it cannot be read (a zombie's).
std::pair<dev_t, ino_t> namespace_id(const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}

using namespace_key = std::pair<dev_t, ino_t>;

// The processes whose network namespace is `wanted` (as `ip netns pids`).
std::vector<pid_t> processes_in(namespace_key wanted) {
  std::vector<pid_t> out;
  if (wanted.second == 0) return out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 0) continue;
    if (namespace_id("/proc/" + std::string(e->d_name) + "/ns/net") == wanted)
      out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return out;
}

// Kills (SIGKILL) every process in namespace `key` and waits until none is left (their parents
// reap them: this process's reader threads, or init); false when some outlived `limit`.
bool empty_namespace(namespace_key key, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto pids = processes_in(key);
    if (pids.empty()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    for (const auto pid : pids) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(10ms);  // a bounded poll for the kernel to finish the kills
  }
}

// Empties and deletes namespace `name`; reports (stderr) what it could not do. Emptied again after
// its name is gone: a process that opened the name before (`ip netns exec` on its way in) may
// enter it meanwhile.
void delete_namespace(const std::string& name) {
  const std::string file = std::string(netns_dir) + "/" + name;
  const auto key = namespace_id(file);
  // Held open until the end: the namespace (and so its inode number, the key) stays this one's
  // and cannot be reused by a namespace made meanwhile.
  const int hold = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  bool emptied = empty_namespace(key, 20s);
  try {
    ip_command({"netns", "delete", name});
  } catch (const std::exception& e) {
    std::cerr << "host_rig: " << e.what() << "\n";
  }
  emptied = empty_namespace(key, 20s) && emptied;
  if (hold >= 0) ::close(hold);
  if (!emptied)
    std::cerr << "host_rig: processes in network namespace " << name << " outlived SIGKILL for 20 s\n";
}

// Rigs alive in this process, torn down at exit() and on SIGINT / SIGTERM. The mutex is held
// across every teardown, so a signal's teardown and a destructor's never overlap.
struct rig_registry {
  std::mutex mutex;
  std::set<host_rig*> rigs;
};
rig_registry& registry() {
  static auto* r = new rig_registry;  // never destroyed: the exit and signal paths use it last
  return *r;
}

void tear_down_all() {
  std::lock_guard<std::mutex> lock(registry().mutex);
  for (auto* rig : registry().rigs) rig->tear_down();
}

int signal_pipe[2] = {-1, -1};
struct sigaction previous_int {
}, previous_term{};

void on_signal(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  (void)!::write(signal_pipe[1], &byte, 1);
}

// Puts on_signal in front of SIGINT's and SIGTERM's handlers, unless it is there already,
// keeping the handler it replaces to hand the signal on to.
void hook_signals() {
  for (auto [sig, previous] : {std::pair{SIGINT, &previous_int}, std::pair{SIGTERM, &previous_term}}) {
    struct sigaction now {};
    ::sigaction(sig, nullptr, &now);
    if (now.sa_handler == on_signal) continue;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(sig, &action, previous);
  }
}

// exit() and SIGINT / SIGTERM tear every rig down. A signal is handled on a thread of its own (a
// signal handler can do nothing but wake it), which then hands the signal to the handler that was
// there before (Catch's, or the default one that ends the process). The hook goes in front again
// at every rig made: a test framework that sets its own handlers per test case (Catch does) takes
// it away when the case ends.
void install_teardown_hooks() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit(tear_down_all);
    if (::pipe2(signal_pipe, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("host_rig: pipe: ") + std::strerror(errno));
    std::thread([] {
      unsigned char sig = 0;
      while (::read(signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
      }
      tear_down_all();
      ::sigaction(SIGINT, &previous_int, nullptr);
      ::sigaction(SIGTERM, &previous_term, nullptr);
      ::raise(sig);
    }).detach();
  });
  hook_signals();
}

// Deletes the namespaces that rigs (and probes) of processes no longer running left behind
// ("coh<pid>-...").
void remove_stale_namespaces() {
  static const std::regex rig_name("coh([0-9]+)-.*");
  for (const auto& name : network_namespaces()) {
    std::smatch m;
    if (!std::regex_match(name, m, rig_name)) continue;
    const auto pid = static_cast<pid_t>(std::stol(m[1]));
    if (pid != ::getpid() && !process_alive(pid)) delete_namespace(name);
  }
}

}  // namespace

std::string ip_command(const std::vector<std::string>& args) {
  if (ip_program().empty()) throw std::runtime_error("no `ip` program (iproute2)");
  std::vector<std::string> argv{ip_program()};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = run_program(argv, {}, 60s);
  if (r.exit_code != 0) {
    std::string cmd = "ip";
    for (const auto& a : args) cmd += " " + a;
    throw std::runtime_error(cmd + " failed (exit " + std::to_string(r.exit_code) + "): " + r.err + r.out);
  }
  return r.out;
}

std::vector<std::string> network_namespaces() {
  std::vector<std::string> out;
  DIR* dir = ::opendir(netns_dir);
  if (dir == nullptr) return out;
  while (const dirent* e = ::readdir(dir))
    if (e->d_name[0] != '.') out.push_back(e->d_name);
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> network_links() {
  std::vector<std::string> out;
  std::istringstream in(ip_command({"-o", "link", "show"}));
  // "2: eth0@if3: <BROADCAST,...> ..." -> "eth0"
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(": ");
    if (colon == std::string::npos) continue;
    auto name = line.substr(colon + 2, line.find(':', colon + 2) - colon - 2);
    out.push_back(name.substr(0, name.find('@')));
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  // "pid (comm) S ...": the state follows the last ')'.
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' &&
         line[close + 2] != 'X';
}

std::string program_path(const std::string& name) {
  const char* dir = std::getenv("COHORT_BIN");
  if (dir == nullptr || *dir == '\0')
    throw std::runtime_error("$COHORT_BIN is not set (run the test through ctest)");
  return std::string(dir) + "/" + name;
}

std::string host_rig::unavailable_reason() {
  static const std::string reason = []() -> std::string {
    if (::geteuid() != 0) return "not root (network namespaces and veth pairs need root)";
    if (ip_program().empty()) return "no `ip` program (iproute2) on PATH, /usr/sbin or /sbin";
    const std::string probe = "coh" + std::to_string(::getpid()) + "-probe";
    try {
      ip_command({"netns", "add", probe});
    } catch (const std::exception& e) {
      return std::string("the kernel refused a network namespace: ") + e.what();
    }
    try {
      ip_command({"netns", "delete", probe});
    } catch (const std::exception& e) {
      return std::string("a network namespace could not be deleted: ") + e.what();
    }
    return "";
  }();
  return reason;
}

host_rig::host_rig(int hosts) {
  if (hosts < 1 || hosts > 200)
    throw std::invalid_argument("host_rig: " + std::to_string(hosts) + " hosts; 1 to 200 are allowed");
  if (const auto why = unavailable_reason(); !why.empty())
    throw std::runtime_error("host_rig: cannot make hosts here: " + why);
  static std::atomic<int> counter{0};
  prefix_ = "coh" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-";
  install_teardown_hooks();
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    remove_stale_namespaces();
    registry().rigs.insert(this);
  }
  try {
    build(hosts);
  } catch (...) {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().rigs.erase(this);
    tear_down();
    throw;
  }
}

host_rig::~host_rig() {
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().rigs.erase(this);
  tear_down();
}

// The bridge's namespace first, then per host: its namespace with loopback up, a veth pair made
// inside it whose other end goes straight into the bridge's namespace (so never into the
// machine's), the port on the bridge, the host's address.
void host_rig::build(int hosts) {
  bridge_ = prefix_ + "bridge";
  ip_command({"netns", "add", bridge_});
  ip_command({"-n", bridge_, "link", "add", "br0", "type", "bridge"});
  ip_command({"-n", bridge_, "link", "set", "br0", "up"});
  for (int i = 0; i < hosts; ++i) {
    const std::string ns = prefix_ + "h" + std::to_string(i), port = "p" + std::to_string(i);
    ip_command({"netns", "add", ns});
    hosts_.push_back(ns);
    ip_command({"-n", ns, "link", "set", "lo", "up"});
    ip_command(
        {"-n", ns, "link", "add", interface_name(), "type", "veth", "peer", "name", port, "netns", bridge_});
    ip_command({"-n", bridge_, "link", "set", port, "master", "br0"});
    ip_command({"-n", bridge_, "link", "set", port, "up"});
    ip_command({"-n", ns, "addr", "add", address(i) + "/24", "dev", interface_name()});
    ip_command({"-n", ns, "link", "set", interface_name(), "up"});
  }
}

void host_rig::tear_down() {
  if (torn_down_) return;
  torn_down_ = true;
  for (const auto& ns : hosts_) delete_namespace(ns);
  if (!bridge_.empty()) delete_namespace(bridge_);
}

std::string host_rig::address(int host) const {
  if (host < 0 || host >= size())
    throw std::out_of_range("host_rig: no host " + std::to_string(host) + " (0.." +
                            std::to_string(size() - 1) + ")");
  return "10.213.0." + std::to_string(host + 1);
}

std::string host_rig::ip_path() { return ip_program(); }

std::vector<std::string> host_rig::exec_prefix(int host) const {
  return {ip_program(), "netns", "exec", netns(host)};
}

std::unique_ptr<running_process> host_rig::start(int host, const std::vector<std::string>& argv,
                                                 const std::map<std::string, std::string>& env) const {
  auto full = exec_prefix(host);
  full.insert(full.end(), argv.begin(), argv.end());
  return std::make_unique<running_process>(full, env);
}

command_result host_rig::run(int host, const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& env,
                             std::chrono::seconds limit) const {
  auto full = exec_prefix(host);
  full.insert(full.end(), argv.begin(), argv.end());
  return run_program(full, env, limit);
}

void host_rig::cut(int host) {
  (void)address(host);  // names the host in the error when there is none
  ip_command({"-n", bridge_, "link", "set", "p" + std::to_string(host), "down"});
}

void host_rig::heal(int host) {
  (void)address(host);
  ip_command({"-n", bridge_, "link", "set", "p" + std::to_string(host), "up"});
}

namespace {

// The hardware address a cut pair's neighbour entries are pinned to: locally administered, and
// one no interface of a rig has (the kernel draws veth addresses at random).
constexpr const char* nowhere_mac = "02:00:00:00:00:00";

}  // namespace

void host_rig::cut_between(int a, int b) {
  if (a == b) throw std::invalid_argument("host_rig::cut_between: host " + std::to_string(a) + " with itself");
  for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}})
    ip_command({"-n", netns(from), "neigh", "replace", address(to), "lladdr", nowhere_mac, "nud", "permanent",
                "dev", interface_name()});
}

void host_rig::heal_between(int a, int b) {
  if (a == b) throw std::invalid_argument("host_rig::heal_between: host " + std::to_string(a) + " with itself");
  for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}})
    ip_command({"-n", netns(from), "neigh", "del", address(to), "dev", interface_name()});
}

std::vector<pid_t> host_rig::processes(int host) const {
  return processes_in(namespace_id(std::string(netns_dir) + "/" + netns(host)));
}

std::vector<std::string> host_rig::listening(int host) const {
  const std::string text = in_host(host, [] {
    std::string out;
    for (const char* file : {"/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"}) {
      std::ifstream in(file);
      out += std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return out;
  });
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    if (!(fields >> slot >> local >> remote >> state) || state != "0A") continue;  // 0A: LISTEN
    const auto colon = local.find(':');
    const auto hex = local.substr(0, colon);
    const int port = std::stoi(local.substr(colon + 1), nullptr, 16);
    std::string address;
    if (hex.size() == 8) {  // IPv4 in the kernel's byte order, little endian here
      const auto v = static_cast<std::uint32_t>(std::stoul(hex, nullptr, 16));
      address = std::to_string(v & 0xff) + "." + std::to_string((v >> 8) & 0xff) + "." +
                std::to_string((v >> 16) & 0xff) + "." + std::to_string(v >> 24);
    } else {
      address = "[" + hex + "]";
    }
    out.push_back(address + ":" + std::to_string(port));
  }
  return out;
}

void host_rig::enter(int host) const {
  const std::string file = std::string(netns_dir) + "/" + netns(host);
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("host_rig: open " + file + ": " + std::strerror(errno));
  const int rc = ::setns(fd, CLONE_NEWNET);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw std::runtime_error("host_rig: setns " + file + ": " + std::strerror(err));
}

}  // namespace cohort::test

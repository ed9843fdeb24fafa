// Several "hosts" on one machine, for cluster tests where hosts, interfaces and partitions
// matter: each host is a network namespace with a stack of its own (loopback up, eth0 at
// 10.213.0.<i+1>/24), joined by a veth pair to a bridge that lives in a namespace of its own, so
// the machine's own namespace never gains a link. Namespace names carry a prefix unique to the
// rig ("coh<pid>-<k>-"), so rigs of parallel tests never meet, and their addresses never leave
// their namespaces. cut(i) / heal(i) set host i's port on the bridge down / up (a partition: its
// packets are dropped, its own stack is untouched); cut_between(a, b) cuts hosts a and b from each
// other only.
//
// Teardown (the destructor, exit(), SIGINT, SIGTERM) kills every process inside the rig's
// namespaces, whoever started it, and deletes the namespaces (their links go with them). A rig
// also removes what a rig of a process that no longer runs left behind (e.g. one killed with
// kill -9). Everything needs root and iproute2's `ip`: tests start with COHORT_NEED_HOSTS(),
// which skips them, saying why, where namespaces cannot be made.
//
// One thread uses a rig; in_host runs its function on a thread of its own.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "tests/cluster/cluster_harness.hpp"
#include "tests/support/etcd_cluster.hpp"

namespace cohort::test {

class host_rig {
 public:
  // Why hosts cannot be made on this machine ("" when they can): not root, no `ip`, or the
  // kernel refused a network namespace. Asked once per process.
  static std::string unavailable_reason();

  // Makes `hosts` hosts (1..200); throws std::runtime_error naming the `ip` command that failed,
  // after removing what it had made.
  explicit host_rig(int hosts);
  ~host_rig();
  host_rig(const host_rig&) = delete;
  host_rig& operator=(const host_rig&) = delete;

  int size() const { return static_cast<int>(hosts_.size()); }
  // Host i's address ("10.213.0.<i+1>") on its interface interface_name() ("eth0").
  std::string address(int host) const;
  static std::string interface_name() { return "eth0"; }
  // Host i's namespace (under /run/netns), and the bridge's.
  const std::string& netns(int host) const {
    (void)address(host);  // names the host in the error when there is none
    return hosts_[static_cast<std::size_t>(host)];
  }
  const std::string& bridge_netns() const { return bridge_; }
  // The `ip` program (iproute2) the rig runs: on PATH, else in /usr/sbin or /sbin; "" when none.
  static std::string ip_path();
  // The command prefix that runs a program inside host i: {IP, "netns", "exec", NAME}.
  std::vector<std::string> exec_prefix(int host) const;

  // Starts argv inside host i (argv[0] a path or a name on PATH), its output kept.
  std::unique_ptr<running_process> start(int host, const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& env = {}) const;
  // Runs argv inside host i to its end; throws when it has not ended within `limit`.
  command_result run(int host, const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env = {},
                     std::chrono::seconds limit = std::chrono::seconds(120)) const;

  // Runs fn on a thread that entered host i's network namespace, and returns what it returns
  // (or throws what it threw): sockets it creates belong to host i.
  template <class F>
  auto in_host(int host, F&& fn) const -> decltype(fn()) {
    using result = decltype(fn());
    std::exception_ptr error;
    std::conditional_t<std::is_void_v<result>, int, std::optional<result>> out{};
    std::thread t([&] {
      try {
        enter(host);
        if constexpr (std::is_void_v<result>)
          fn();
        else
          out.emplace(fn());
      } catch (...) {
        error = std::current_exception();
      }
    });
    t.join();
    if (error) std::rethrow_exception(error);
    if constexpr (!std::is_void_v<result>)
      return std::move(*out);
    else
      (void)out;
  }

  // Host i's port on the bridge down (cut: nothing reaches it, it reaches nothing) or up again.
  void cut(int host);
  void heal(int host);
  // Hosts a and b no longer reach each other, and both still reach every other host (a cut of one
  // pair of hosts): each one's neighbour entry for the other is pinned to a hardware address no
  // interface has, so what they send each other is dropped on the way, silently, as by a cut
  // link. heal_between(a, b) removes the pinned entries (the next packet asks for the real one).
  // Throws std::invalid_argument for a == b.
  void cut_between(int a, int b);
  void heal_between(int a, int b);

  // The processes inside host i's namespace now (any parent).
  std::vector<pid_t> processes(int host) const;
  // The TCP sockets listening inside host i now, "ADDRESS:PORT" (IPv6 as "[HEX]:PORT"), from its
  // /proc/net/tcp and tcp6.
  std::vector<std::string> listening(int host) const;

  // Kills every process inside the rig's namespaces and waits until none is left, then deletes
  // the namespaces. Idempotent; the destructor calls it.
  void tear_down();

 private:
  void enter(int host) const;  // this thread joins host i's network namespace
  void build(int hosts);

  std::string prefix_;
  std::string bridge_;
  std::vector<std::string> hosts_;
  bool torn_down_ = false;
};

// The ip command's output, run to its end in the caller's namespace; throws std::runtime_error
// with the command and what it said when it fails.
std::string ip_command(const std::vector<std::string>& args);

// The network namespaces under /run/netns now ("ip netns list"), sorted.
std::vector<std::string> network_namespaces();
// The links of the caller's network namespace now, by name, sorted.
std::vector<std::string> network_links();
// Whether process `pid` exists (a zombie counts as gone).
bool process_alive(pid_t pid);
// The path of one of cohort's programs: $COHORT_BIN/name (ctest sets COHORT_BIN).
std::string program_path(const std::string& name);

// `submit ARGS...` run inside `host`, given the heads `heads` (COHORT_ADDRESS) and `credentials`.
inline command_result submit_in_host(const host_rig& rig, int host, const std::string& heads,
                                     const std::string& credentials, const std::vector<std::string>& args) {
  std::vector<std::string> argv{program_path("submit")};
  argv.insert(argv.end(), args.begin(), args.end());
  return rig.run(host, argv, {{"COHORT_ADDRESS", heads}, {"COHORT_CREDENTIALS", credentials}});
}

// Polls `submit status ID --json` from inside `host` until pred holds; throws with the last
// answer after `timeout`.
inline nlohmann::json wait_for_job_in_host(const host_rig& rig, int host, const std::string& heads,
                                           const std::string& credentials, const std::string& id,
                                           const std::function<bool(const nlohmann::json&)>& pred,
                                           std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto r = submit_in_host(rig, host, heads, credentials, {"status", id, "--json"});
    last = r.out + r.err;
    if (r.exit_code == 0) {
      auto s = nlohmann::json::parse(r.out);
      if (pred(s)) return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  throw std::runtime_error("job " + id + " did not reach the awaited state; last answer: " + last);
}

// A cluster-head inside `host` on the etcd store `location` (its keys in `keys_dir`), serving on
// the host's address at `port`, with a 3 s heartbeat timeout and lease as the tests use.
inline std::unique_ptr<running_process> start_head_in_host(const host_rig& rig, int host, const std::string& location,
                                                           const std::string& keys_dir, int port) {
  return rig.start(host, {program_path("cluster-head"), "--store", location, "--keys-dir", keys_dir, "--bind",
                          rig.address(host), "--port", std::to_string(port), "--heartbeat-timeout", "3",
                          "--lease-ttl", "3"});
}

// Where the members of an etcd cluster run: one on each of hosts first .. first + count - 1 of
// `rig`, on its address, probed from inside it.
inline std::vector<etcd_member_host> etcd_member_hosts(const host_rig& rig, int first, int count) {
  std::vector<etcd_member_host> out;
  for (int h = first; h < first + count; ++h)
    out.push_back({rig.address(h), rig.exec_prefix(h),
                   [&rig, h](const std::function<void()>& probe) { rig.in_host(h, probe); }});
  return out;
}

}  // namespace cohort::test

// Skips the test case, saying why, where the rig cannot make hosts.
#define COHORT_NEED_HOSTS()                                                           \
  do {                                                                                \
    const auto cohort_why_no_hosts = cohort::test::host_rig::unavailable_reason();    \
    if (!cohort_why_no_hosts.empty()) {                                               \
      WARN("skipped: no network namespaces here: " << cohort_why_no_hosts);           \
      SUCCEED("skipped: no network namespaces"); /* counts as the case's assertion */ \
      return;                                                                         \
    }                                                                                 \
  } while (false)

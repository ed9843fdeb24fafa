// A real etcd cluster of `members` processes on 127.0.0.1 for tests: Debian's etcd binary (from
// PATH; scripts/install-deps --tests installs etcd-server), free ports, data under a temp dir. The
// constructor returns once every member answers a linearizable read (the cluster has a leader);
// the destructor kills (SIGKILL) and reaps every member still running. kill(i) and restart(i) take
// one member down (kill -9) and bring it back on its data dir, for fault tests. Members elect fast
// (heartbeat 50 ms, election timeout 500 ms) so leases of 1 s are allowed and failovers are quick.
// Given etcd_member_host placements instead, each member runs on a host of its own (e.g. a
// network namespace of tests/cluster/host_rig.hpp) at that host's address, ports 2379 and 2380.
// status(i), leader() and move_leader(i) ask the members themselves, for partition tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/store/etcd_client.hpp"
#include "tests/support/temp_dir.hpp"

namespace cohort::test {

// With cert and key set, members serve their client port over TLS (etcds:// locations; the
// probes need COHORT_ETCD_CA naming the CA that signed cert); with client_ca set too, they demand
// client certificates signed by it (--client-cert-auth).
struct etcd_tls {
  std::string cert, key, client_ca;
};

// Where one member runs: the address of its host, the command prefix that starts a program
// there (e.g. {"ip", "netns", "exec", NAME}; empty: this process's host) and how to run a probe
// from a place that reaches the member (empty: in the calling thread).
struct etcd_member_host {
  std::string address = "127.0.0.1";
  std::vector<std::string> exec_prefix;
  std::function<void(const std::function<void()>&)> reach;
};

// A member's process ended before it answered (etcd exits when it cannot bind its ports).
struct etcd_member_exited : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class etcd_cluster {
 public:
  // On free ports of 127.0.0.1. A port found free can be taken by another process (a test running
  // beside this one) before etcd binds it; etcd then exits, and the cluster starts again on other
  // ports, at most `port_attempts` times.
  explicit etcd_cluster(int members = 3, etcd_tls tls = {}) : dir_("etcd"), tls_(std::move(tls)) {
    constexpr int port_attempts = 5;
    for (int attempt = 1;; ++attempt) {
      members_.clear();
      initial_.clear();
      for (int i = 0; i < members; ++i) members_.push_back({free_port(), free_port(), -1, {}});
      try {
        start_all();
        return;
      } catch (const etcd_member_exited&) {
        for (int i = 0; i < members; ++i) {
          kill(i);
          std::filesystem::remove_all(dir_.path() / name(i));  // a fresh member next time
        }
        if (attempt == port_attempts) throw;
      }
    }
  }
  // One member per host, each on its host's address.
  explicit etcd_cluster(std::vector<etcd_member_host> hosts) : dir_("etcd") {
    for (auto& h : hosts) members_.push_back({2379, 2380, -1, std::move(h)});
    start_all();
  }
  ~etcd_cluster() {
    for (std::size_t i = 0; i < members_.size(); ++i) kill(static_cast<int>(i));
  }
  etcd_cluster(const etcd_cluster&) = delete;
  etcd_cluster& operator=(const etcd_cluster&) = delete;

  // "etcd://127.0.0.1:A,127.0.0.1:B,127.0.0.1:C/<prefix>" ("etcds://" over TLS), members in
  // `order` (default all).
  std::string location(const std::string& prefix, std::vector<int> order = {}) const {
    if (order.empty())
      for (std::size_t i = 0; i < members_.size(); ++i) order.push_back(static_cast<int>(i));
    std::string out = scheme();
    for (std::size_t k = 0; k < order.size(); ++k)
      out += (k ? "," : "") + client_address(order[k]);
    return out + prefix;
  }
  int size() const { return static_cast<int>(members_.size()); }
  // The member that leads the etcd cluster now (asked of a running member); -1 when none says.
  int leader() const {
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (members_[i].pid < 0) continue;
      try {
        auto status = member_status(static_cast<int>(i));
        auto leader_id = status.value("leader", nlohmann::json()).dump();
        for (std::size_t j = 0; j < members_.size(); ++j) {
          if (members_[j].pid < 0) continue;
          auto s = member_status(static_cast<int>(j));
          if (s["header"].value("member_id", nlohmann::json()).dump() == leader_id)
            return static_cast<int>(j);
        }
      } catch (const std::exception&) {
      }
    }
    return -1;
  }
  // Member i's own answer to /v3/maintenance/status (asked where it is reached): its id in
  // header.member_id, the member it follows in leader, its revision in header.revision.
  nlohmann::json status(int i) const { return member_status(i); }
  // Member i's id in the etcd cluster (as etcd's JSON writes uint64s: a string).
  std::string member_id(int i) const { return member_status(i)["header"].value("member_id", ""); }
  // Makes member `to` the etcd leader (etcd's MoveLeader, asked of the leader now) and returns
  // once every running member names it; throws after `timeout`.
  void move_leader(int to, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const auto target = member_id(to);
    for (;;) {
      const int now = leader();
      bool all = now == to;
      for (std::size_t i = 0; all && i < members_.size(); ++i)
        if (members_[i].pid >= 0) all = member_status(static_cast<int>(i)).value("leader", "") == target;
      if (all) return;
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("etcd member " + name(to) + " did not become the leader in time");
      if (now >= 0 && now != to) {
        try {
          reach(now, [&] {
            core::store::etcd_client c(core::store::parse_etcd_location(scheme() + client_address(now)),
                                       std::chrono::seconds(5));
            c.call("/v3/maintenance/transfer-leadership", {{"targetID", target}});
          });
        } catch (const std::exception&) {  // a leader that changed meanwhile: asked again
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  // Starts member `i` again after kill(i), on its data dir and ports, and returns once it answers
  // a linearizable read (it rejoined a cluster that has a leader); throws after `timeout`.
  void restart(int i, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    if (members_[i].pid >= 0) throw std::runtime_error("etcd member " + name(i) + " is running");
    start(i);
    wait_healthy(i, std::chrono::steady_clock::now() + timeout);
  }
  bool running(int i) const { return members_[i].pid >= 0; }
  // Member i's output (appended to across restarts).
  std::string log_path(int i) const { return (dir_.path() / (name(i) + ".log")).string(); }
  // SIGKILLs member `i` and reaps it (no-op when it is not running).
  void kill(int i) {
    auto& m = members_[i];
    if (m.pid < 0) return;
    ::kill(m.pid, SIGKILL);
    int status = 0;
    ::waitpid(m.pid, &status, 0);
    m.pid = -1;
  }

 private:
  struct member {
    int client, peer;
    pid_t pid;
    etcd_member_host host;
  };
  void start_all() {
    const int members = size();
    for (int i = 0; i < members; ++i)
      initial_ += (i ? "," : "") + name(i) + "=" + peer_url(i);
    for (int i = 0; i < members; ++i) start(i);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int i = 0; i < members; ++i) wait_healthy(i, deadline);
  }
  static std::string name(int i) { return "m" + std::to_string(i); }
  std::string scheme() const { return tls_.cert.empty() ? "etcd://" : "etcds://"; }
  std::string client_address(int i) const {
    return members_[i].host.address + ":" + std::to_string(members_[i].client);
  }
  std::string peer_url(int i) const {
    return "http://" + members_[i].host.address + ":" + std::to_string(members_[i].peer);
  }
  // Runs `probe` where member i is reached.
  void reach(int i, const std::function<void()>& probe) const {
    if (members_[i].host.reach)
      members_[i].host.reach(probe);
    else
      probe();
  }
  nlohmann::json member_status(int i) const {
    nlohmann::json out;
    reach(i, [&] {
      core::store::etcd_client c(core::store::parse_etcd_location(scheme() + client_address(i)),
                                 std::chrono::seconds(5));
      out = c.call("/v3/maintenance/status", nlohmann::json::object());
    });
    return out;
  }
  static int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("etcd_cluster: cannot find a free port on 127.0.0.1");
    ::close(fd);
    return ntohs(a.sin_port);
  }
  // Waits until member i answers a linearizable read (which needs a leader); throws past deadline,
  // or etcd_member_exited as soon as its process has ended (it is reaped).
  void wait_healthy(int i, std::chrono::steady_clock::time_point deadline) {
    reach(i, [&] {
      core::store::etcd_client probe(core::store::parse_etcd_location(scheme() + client_address(i)),
                                     std::chrono::milliseconds(500));
      for (;;) {
        try {
          probe.call("/v3/kv/range", {{"key", "AA=="}});
          return;
        } catch (const std::exception& e) {
          int status = 0;
          if (::waitpid(members_[i].pid, &status, WNOHANG) == members_[i].pid) {
            members_[i].pid = -1;
            throw etcd_member_exited("etcd member " + name(i) +
                                     " exited before it answered (its log: " + log_path(i) + ")");
          }
          if (std::chrono::steady_clock::now() > deadline)
            throw std::runtime_error("etcd member " + name(i) + " did not become healthy in time: " +
                                     e.what() + " (its log: " + log_path(i) + ")");
        }
      }
    });
  }
  void start(int i) {
    const auto client = std::string(tls_.cert.empty() ? "http" : "https") + "://" + client_address(i);
    std::vector<std::string> args = members_[i].host.exec_prefix;
    args.insert(args.end(), {"etcd",
                                  "--name", name(i),
                                  "--data-dir", (dir_.path() / name(i)).string(),
                                  "--listen-client-urls", client,
                                  "--advertise-client-urls", client,
                                  "--listen-peer-urls", peer_url(i),
                                  "--initial-advertise-peer-urls", peer_url(i),
                                  "--initial-cluster", initial_,
                                  "--initial-cluster-token", "cohort-test",
                                  "--initial-cluster-state", "new",
                                  "--heartbeat-interval", "50",
                                  "--election-timeout", "500"});
    if (!tls_.cert.empty()) args.insert(args.end(), {"--cert-file", tls_.cert, "--key-file", tls_.key});
    if (!tls_.client_ca.empty())
      args.insert(args.end(), {"--client-cert-auth", "--trusted-ca-file", tls_.client_ca});
    const auto log = (dir_.path() / (name(i) + ".log")).string();
    std::fflush(nullptr);  // else the child's freopen writes what this process has buffered
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("etcd_cluster: fork failed");
    if (pid == 0) {
      FILE* out = std::freopen(log.c_str(), "a", stdout);
      if (out) ::dup2(::fileno(stdout), 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "cannot run etcd: install etcd-server (scripts/install-deps --tests)\n");
      ::_exit(127);
    }
    members_[i].pid = pid;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      throw std::runtime_error("etcd member " + name(i) + " exited at once; see " + log);
  }

  temp_dir dir_;
  etcd_tls tls_;
  std::vector<member> members_;
  std::string initial_;  // --initial-cluster (ignored by etcd on a restart: the data dir has it)
};

}  // namespace cohort::test

// The multi-host rig itself: hosts reach each other over the bridge and only there, a cut host is
// unreachable until healed, and no namespace, link or process outlives a rig (destroyed, or its
// process ended by SIGTERM, SIGINT or kill -9).
#include "tests/cluster/host_rig.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <regex>

#include <catch2/catch.hpp>

#include "tests/support/tcp_listener.hpp"

using cohort::test::host_rig;
using cohort::test::running_process;
using namespace std::chrono_literals;

namespace {

// A socket of the calling thread's namespace: closed when it goes.
struct socket_fd {
  int fd = -1;
  explicit socket_fd(int f) : fd(f) {}
  socket_fd(socket_fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  ~socket_fd() {
    if (fd >= 0) ::close(fd);
  }
};

sockaddr_in ipv4(const std::string& address, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  return a;
}

// A TCP listener on address:port of the calling thread's namespace; throws where it cannot bind.
cohort::test::tcp_listener listen_on(const std::string& address, int port) {
  cohort::test::tcp_listener l(address, port, /*reuse_address=*/true);
  if (!l.bound())
    throw std::runtime_error("cannot listen on " + address + ":" + std::to_string(port) + ": " + l.error());
  return l;
}

// Whether a TCP connection to address:port from the calling thread's namespace is established
// within `limit`.
bool connects(const std::string& address, int port, std::chrono::milliseconds limit) {
  socket_fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  auto a = ipv4(address, port);
  if (::connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return true;
  if (errno != EINPROGRESS) return false;
  pollfd p{s.fd, POLLOUT, 0};
  if (::poll(&p, 1, static_cast<int>(limit.count())) != 1) return false;
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
  return err == 0;
}

// Whether host `from` connects to address:port within `deadline`, trying again after each
// failure (a link just set up, or healed, takes a moment to carry packets).
bool connects_by(const host_rig& rig, int from, const std::string& address, int port,
                 std::chrono::seconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  do {
    if (rig.in_host(from, [&] { return connects(address, port, 1000ms); })) return true;
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

std::vector<std::string> with_prefix(const std::vector<std::string>& names, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& n : names)
    if (n.rfind(prefix, 0) == 0) out.push_back(n);
  return out;
}

// The namespaces cohort-hosts printed ("host I: netns NAME address ...").
std::vector<std::string> printed_namespaces(const running_process& p, int hosts) {
  static const std::regex line("host [0-9]+: netns ([^ ]+) address");
  std::vector<std::string> out;
  for (const auto& l : p.wait_for_lines(": netns ", static_cast<std::size_t>(hosts), 60s)) {
    std::smatch m;
    REQUIRE(std::regex_search(l, m, line));
    out.push_back(m[1]);
  }
  return out;
}

bool any_left(const std::vector<std::string>& namespaces) {
  const auto now = cohort::test::network_namespaces();
  return std::any_of(namespaces.begin(), namespaces.end(),
                     [&](const std::string& n) { return std::find(now.begin(), now.end(), n) != now.end(); });
}

}  // namespace

TEST_CASE("hosts of a rig reach each other at their addresses, and a cut host reaches no one and "
          "no one reaches it until it is healed",
          "[hosts]") {
  COHORT_NEED_HOSTS();
  host_rig rig(3);
  const int port = 7000;
  auto on_1 = rig.in_host(1, [&] { return listen_on(rig.address(1), port); });
  auto on_2 = rig.in_host(2, [&] { return listen_on(rig.address(2), port); });
  CHECK(connects_by(rig, 0, rig.address(1), port, 30s));
  CHECK(connects_by(rig, 0, rig.address(2), port, 30s));
  // Each host has a stack of its own: host 1's address is not host 0's.
  CHECK_FALSE(rig.in_host(0, [&] { return connects("127.0.0.1", port, 1000ms); }));

  rig.cut(1);
  // Dropped, not refused: a connection that is never established.
  CHECK_FALSE(rig.in_host(0, [&] { return connects(rig.address(1), port, 2000ms); }));
  CHECK_FALSE(rig.in_host(1, [&] { return connects(rig.address(2), port, 2000ms); }));
  CHECK(connects_by(rig, 0, rig.address(2), port, 30s));  // the others still reach each other

  rig.heal(1);
  CHECK(connects_by(rig, 0, rig.address(1), port, 30s));
  CHECK(connects_by(rig, 1, rig.address(2), port, 30s));
}

TEST_CASE("two hosts cut from each other reach neither each other nor in either direction, both "
          "still reach a third host, and healed they reach each other again",
          "[hosts]") {
  COHORT_NEED_HOSTS();
  host_rig rig(3);
  const int port = 7000;
  auto on_0 = rig.in_host(0, [&] { return listen_on(rig.address(0), port); });
  auto on_1 = rig.in_host(1, [&] { return listen_on(rig.address(1), port); });
  auto on_2 = rig.in_host(2, [&] { return listen_on(rig.address(2), port); });
  REQUIRE(connects_by(rig, 0, rig.address(1), port, 30s));

  rig.cut_between(0, 1);
  // Dropped on the way, not refused: connections that are never established.
  CHECK_FALSE(rig.in_host(0, [&] { return connects(rig.address(1), port, 2000ms); }));
  CHECK_FALSE(rig.in_host(1, [&] { return connects(rig.address(0), port, 2000ms); }));
  CHECK(connects_by(rig, 0, rig.address(2), port, 30s));
  CHECK(connects_by(rig, 1, rig.address(2), port, 30s));
  CHECK(connects_by(rig, 2, rig.address(0), port, 30s));
  CHECK(connects_by(rig, 2, rig.address(1), port, 30s));
  CHECK_THROWS_AS(rig.cut_between(2, 2), std::invalid_argument);

  rig.heal_between(0, 1);
  CHECK(connects_by(rig, 0, rig.address(1), port, 30s));
  CHECK(connects_by(rig, 1, rig.address(0), port, 30s));
}

TEST_CASE("a program started in a host sees that host's interfaces only: loopback and eth0 with "
          "the host's address",
          "[hosts]") {
  COHORT_NEED_HOSTS();
  host_rig rig(2);
  const auto r = rig.run(1, {host_rig::ip_path(), "-o", "-4", "addr", "show"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("lo    inet 127.0.0.1/8"));
  CHECK_THAT(r.out, Catch::Contains("eth0    inet 10.213.0.2/24"));
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 2);
}

TEST_CASE("a rig destroyed leaves no namespace, link or process behind, including processes "
          "started in its hosts by others and their children",
          "[hosts]") {
  COHORT_NEED_HOSTS();
  const auto namespaces_before = cohort::test::network_namespaces();
  const auto links_before = cohort::test::network_links();
  // Both outlive the rig: they end because it ends.
  std::unique_ptr<running_process> sleeper;
  std::unique_ptr<running_process> outside;  // started by the test, not through the rig
  std::vector<pid_t> inside;
  std::string prefix;
  {
    host_rig rig(2);
    prefix = rig.bridge_netns().substr(0, rig.bridge_netns().rfind('-') + 1);
    CHECK(with_prefix(cohort::test::network_namespaces(), prefix).size() == 3);  // 2 hosts, bridge
    sleeper = rig.start(0, {"/bin/sh", "-c", "sleep 600 & echo started; wait"});
    sleeper->wait_for_line("started", 30s);
    auto argv = rig.exec_prefix(1);
    argv.insert(argv.end(), {"/bin/sleep", "600"});
    outside = std::make_unique<running_process>(argv, std::map<std::string, std::string>{});
    // Each process is in its host once `ip netns exec` has entered it.
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while ((rig.processes(0).size() < 2 || rig.processes(1).empty()) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);
    inside = rig.processes(0);
    const auto in_1 = rig.processes(1);
    inside.insert(inside.end(), in_1.begin(), in_1.end());
    REQUIRE(inside.size() == 3);                           // sh, its sleep, and the test's own sleep
    CHECK(cohort::test::network_links() == links_before);  // nothing in the machine's namespace
  }
  CHECK(sleeper->wait_for_exit(30s));
  CHECK(outside->wait_for_exit(30s));
  for (const auto pid : inside) CHECK_FALSE(cohort::test::process_alive(pid));
  CHECK(with_prefix(cohort::test::network_namespaces(), prefix).empty());
  CHECK(cohort::test::network_namespaces() == namespaces_before);
  CHECK(cohort::test::network_links() == links_before);
}

TEST_CASE("SIGTERM or SIGINT to a process holding hosts removes them and ends every process "
          "inside them; a rig made later removes what one killed with kill -9 left",
          "[hosts]") {
  COHORT_NEED_HOSTS();
  for (const int sig : {SIGTERM, SIGINT, SIGKILL}) {
    INFO("signal " << sig);
    running_process holder({cohort::test::program_path("cohort-hosts"), "2"}, {});
    const auto namespaces = printed_namespaces(holder, 2);
    holder.wait_for_line("ready", 60s);
    const std::vector<std::string> argv{host_rig::ip_path(), "netns", "exec", namespaces[1], "/bin/sleep",
                                        "600"};
    running_process sleeper(argv, {});
    // Signalled once the sleeper is inside host 1 (its namespace is the one the name holds).
    const auto in_host_1 = [&] {
      struct stat ns {}, mine {};
      return ::stat(("/run/netns/" + namespaces[1]).c_str(), &ns) == 0 &&
             ::stat(("/proc/" + std::to_string(sleeper.pid()) + "/ns/net").c_str(), &mine) == 0 &&
             ns.st_ino == mine.st_ino && ns.st_dev == mine.st_dev;
    };
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!in_host_1() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    REQUIRE(in_host_1());
    holder.kill(sig);
    REQUIRE(holder.wait_for_exit(60s));
    CHECK(holder.exit_code() == 128 + sig);
    if (sig == SIGKILL) {
      CHECK(any_left(namespaces));  // nothing could run: the namespaces stay behind
      host_rig later(1);
    }
    CHECK_FALSE(any_left(namespaces));
    CHECK(sleeper.wait_for_exit(30s));
  }
}

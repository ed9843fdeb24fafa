// cohort-hosts: N hosts (network namespaces on a bridge, see host_rig.hpp) for as long as a command
// runs, or until SIGINT / SIGTERM; then nothing of them is left. For trying a cluster across hosts
// by hand, for scripts, and for the test that a signal tears a rig down.
//
//   cohort-hosts N                 prints the hosts, waits for SIGINT or SIGTERM
//   cohort-hosts N COMMAND ARGS... runs COMMAND (in the machine's namespace) with
//                                  COHORT_HOST_<i>_NETNS and COHORT_HOST_<i>_ADDRESS set; exits
//                                  with its status once the hosts are gone
//
// A program runs inside host i with `ip netns exec $COHORT_HOST_<i>_NETNS PROGRAM...`.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>

#include "tests/cluster/host_rig.hpp"

int main(int argc, char** argv) {
  const std::string usage = "usage: cohort-hosts N [COMMAND ARGS...]  (N: 1 to 200 hosts)";
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cerr << usage << "\n";
    return argc < 2 ? 2 : 0;
  }
  char* end = nullptr;
  const long n = std::strtol(argv[1], &end, 10);
  if (end == argv[1] || *end != '\0' || n < 1 || n > 200) {
    std::cerr << "cohort-hosts: N '" << argv[1] << "' is not a number of hosts from 1 to 200\n"
              << usage << "\n";
    return 2;
  }
  if (const auto why = cohort::test::host_rig::unavailable_reason(); !why.empty()) {
    std::cerr << "cohort-hosts: cannot make hosts here: " << why << "\n";
    return 77;
  }
  try {
    cohort::test::host_rig rig(static_cast<int>(n));
    std::map<std::string, std::string> env;
    for (int i = 0; i < rig.size(); ++i) {
      std::cout << "host " << i << ": netns " << rig.netns(i) << " address " << rig.address(i) << " on "
                << cohort::test::host_rig::interface_name() << std::endl;
      env["COHORT_HOST_" + std::to_string(i) + "_NETNS"] = rig.netns(i);
      env["COHORT_HOST_" + std::to_string(i) + "_ADDRESS"] = rig.address(i);
    }
    if (argc == 2) {
      std::cout << "cohort-hosts: ready; SIGINT or SIGTERM removes the hosts" << std::endl;
      for (;;) ::pause();  // the rig's signal hook tears it down and ends the process
    }
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::cout << "cohort-hosts: ready; running " << argv[2] << std::endl;
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::execvp(argv[2], argv + 2);
      std::fprintf(stderr, "cohort-hosts: cannot run %s: %s\n", argv[2], std::strerror(errno));
      ::_exit(127);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  } catch (const std::exception& e) {
    std::cerr << "cohort-hosts: " << e.what() << "\n";
    return 1;
  }
}

// Runs one of the project's programs from $COHORT_BIN (set by ctest) as a user would, with
// shell-quoted arguments, and captures its exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "tests/support/files.hpp"

namespace cohort::test {

struct tool_result {
  int code = -1;  // exit status; -1 when killed by a signal
  std::string out;
  std::string err;
};

inline tool_result run_tool(const std::string& program, const std::string& args) {
  const char* bin = std::getenv("COHORT_BIN");
  if (bin == nullptr) throw std::runtime_error("COHORT_BIN is not set (run the tests through ctest)");
  char err_path[] = "/tmp/cohort-tool-stderr-XXXXXX";
  const int fd = ::mkstemp(err_path);
  if (fd < 0) throw std::runtime_error("cannot create a file for stderr in /tmp");
  ::close(fd);
  const std::string cmd = std::string(bin) + "/" + program + " " + args + " 2>" + err_path;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) throw std::runtime_error("popen failed: " + cmd);
  tool_result r;
  char buf[65536];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_file(err_path);
  ::unlink(err_path);
  return r;
}

}  // namespace cohort::test

// Test helper: runs build/bin/cohort-ckpt ($COHORT_BIN) with arguments and captures its exit
// status and its stdout and stderr together.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

namespace cohort::core::ckpt::testing {

struct run_result {
  int status = -1;
  std::string output;
};

inline run_result run_tool(const std::string& args) {
  const char* bin = std::getenv("COHORT_BIN");
  if (!bin) FAIL("COHORT_BIN is not set; run through ctest or set it to build/bin");
  const std::string cmd = std::string(bin) + "/cohort-ckpt " + args + " 2>&1";
  run_result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace cohort::core::ckpt::testing

// Child processes: output captured line by line, exit codes and signals reported.
#include <catch2/catch.hpp>

#include <signal.h>

#include <mutex>

#include "core/proc/child_process.hpp"
#include "tests/support/final_word.hpp"

using cohort::core::proc::child_process;
using cohort::core::proc::exit_status;

namespace {

// Collects a child's lines and waits for its exit.
struct collector {
  std::mutex m;
  std::vector<std::string> lines;
  cohort::test::final_word<exit_status> exit;
  exit_status& status = exit.value;

  child_process::line_handler on_line() {
    return [this](const std::string& l) {
      std::lock_guard<std::mutex> lock(m);
      lines.push_back(l);
    };
  }
  child_process::exit_handler on_exit() {
    return [this](const exit_status& s) { exit.set(s); };
  }
  bool wait() { return exit.wait(); }
};

}  // namespace

TEST_CASE("a child's stdout and stderr arrive as lines, then its exit code", "[core]") {
  collector c;
  child_process child({"/bin/sh", "-c", "echo one; echo two >&2; printf three; exit 3"},
                      {}, c.on_line(), c.on_exit());
  REQUIRE(c.wait());
  CHECK(c.lines == std::vector<std::string>{"one", "two", "three"});
  CHECK_FALSE(c.status.signaled);
  CHECK(c.status.code == 3);
  CHECK(c.status.describe() == "exited with code 3");
}

TEST_CASE("a child killed with SIGKILL reports the signal by name", "[core]") {
  collector c;
  child_process child({"/bin/sh", "-c", "echo ready; exec sleep 30"}, {}, c.on_line(),
                      c.on_exit());
  child.signal(SIGKILL);
  REQUIRE(c.wait());
  CHECK(c.status.signaled);
  CHECK(c.status.signal == SIGKILL);
  CHECK(c.status.describe() == "killed by signal 9 (SIGKILL)");
}

TEST_CASE("extra environment reaches the child", "[core]") {
  collector c;
  child_process child({"/bin/sh", "-c", "echo $COHORT_TEST_VALUE"}, {{"COHORT_TEST_VALUE", "42"}},
                      c.on_line(), c.on_exit());
  REQUIRE(c.wait());
  CHECK(c.lines == std::vector<std::string>{"42"});
  CHECK(c.status.success());
}

TEST_CASE("a program that does not exist exits 127 with a message", "[core]") {
  collector c;
  child_process child({"/nonexistent/program"}, {}, c.on_line(), c.on_exit());
  REQUIRE(c.wait());
  CHECK(c.status.code == 127);
  REQUIRE_FALSE(c.lines.empty());
  CHECK_THAT(c.lines[0], Catch::Contains("exec failed"));
}

TEST_CASE("bytes written to fd 3 arrive on the control channel as written, apart from the output",
          "[core]") {
  collector c;
  std::string control;
  bool empty_piece = false;
  std::mutex control_mutex;
  // Bytes that are no text: a NUL, no newline at the end.
  child_process child({"/bin/sh", "-c", "echo out; printf 'a\\000b\\n' >&3; echo more; printf 'cd' >&3"},
                      {}, c.on_line(), c.on_exit(), [&](const std::string& bytes) {
                        std::lock_guard<std::mutex> lock(control_mutex);
                        empty_piece = empty_piece || bytes.empty();
                        control += bytes;
                      });
  REQUIRE(c.wait());
  CHECK(c.lines == std::vector<std::string>{"out", "more"});
  std::lock_guard<std::mutex> lock(control_mutex);
  CHECK(control == std::string("a\0b\ncd", 6));
  CHECK_FALSE(empty_piece);
}

TEST_CASE("bytes written as commands arrive on the child's fd 4, and a write after its exit fails "
          "without SIGPIPE", "[core]") {
  collector c;
  child_process child({"/bin/sh", "-c", "head -c 5 <&4; echo"}, {}, c.on_line(), c.on_exit(), {},
                      /*command_pipe=*/true);
  REQUIRE(child.write_commands("hello"));
  REQUIRE(c.wait());
  CHECK(c.status.success());
  CHECK(c.lines == std::vector<std::string>{"hello"});
  // The child is gone: the link is broken (and this test process, which does not ignore SIGPIPE,
  // is still here).
  CHECK_FALSE(child.write_commands("more"));
  CHECK_FALSE(child.write_commands("more"));
}

TEST_CASE("a child started without a command pipe has none", "[core]") {
  collector c;
  child_process child({"/bin/sh", "-c", "exit 0"}, {}, c.on_line(), c.on_exit());
  CHECK_FALSE(child.write_commands("x"));
  REQUIRE(c.wait());
}

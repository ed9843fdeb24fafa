// The one Catch2 main every test binary links (compiled once: catch.hpp's main is slow to build).
// Like cohort's programs, tests ignore SIGPIPE: a write to a connection a dead peer closed must
// come back as EPIPE (which the code under test handles), not end the process.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <csignal>

int main(int argc, char* argv[]) {
  std::signal(SIGPIPE, SIG_IGN);
  return Catch::Session().run(argc, argv);
}

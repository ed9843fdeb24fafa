// A real S3-compatible server for tests: the npm package s3rver (scripts/install-deps --tests installs it
// into tests/support/s3rver), started on 127.0.0.1 with its data in a temp dir and one bucket
// (s3_environment puts its credentials in the AWS variables). It listens on a port the system
// picks when it binds (-p 0) and names in its log: a port found free first and passed to it
// could be taken by a test running beside it before it binds. The constructor returns once the
// server answers a signed listing of that bucket; the destructor SIGKILLs and reaps it.
// s3rver checks the access key but not SigV4 signatures (test_sigv4.cpp checks those against
// AWS's examples). Tests that need it start with COHORT_NEED_S3_SERVER(), which skips the test,
// saying why, when s3rver is not installed.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/storage/s3_client.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/support/temp_dir.hpp"

#ifndef COHORT_S3RVER_BIN
#error "COHORT_S3RVER_BIN (the path of s3rver's launcher) must be defined for tests that use s3_server"
#endif

namespace cohort::test {

// s3rver's launcher: $COHORT_S3RVER, else the project's install.
inline std::string s3rver_path() {
  const char* v = std::getenv("COHORT_S3RVER");
  return v && *v ? v : COHORT_S3RVER_BIN;
}
inline bool s3rver_available() { return ::access(s3rver_path().c_str(), X_OK) == 0; }

#define COHORT_NEED_S3_SERVER()                                                                    \
  do {                                                                                             \
    if (!cohort::test::s3rver_available()) {                                                       \
      WARN("skipped: no S3 test server at " << cohort::test::s3rver_path()                         \
                                            << " (run scripts/install-deps --tests, or set COHORT_S3RVER)"); \
      SUCCEED("skipped: no S3 test server"); /* counts as the case's assertion */              \
      return;                                                                                      \
    }                                                                                              \
  } while (false)

class s3_server {
 public:
  static constexpr const char* access_key = "S3RVER";  // s3rver's built-in credentials
  static constexpr const char* secret_key = "S3RVER";

  explicit s3_server(std::string bucket = "cohort-test") : dir_("s3rver"), bucket_(std::move(bucket)) {
    start();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    port_ = wait_for_port(deadline);
    wait_ready(deadline);
  }
  ~s3_server() { kill(); }
  s3_server(const s3_server&) = delete;
  s3_server& operator=(const s3_server&) = delete;

  const std::string& bucket() const { return bucket_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  core::storage::s3_config config() const {
    core::storage::s3_config c;
    c.endpoint = endpoint();
    c.credentials = {access_key, secret_key, ""};
    c.retry_base_delay = std::chrono::milliseconds(10);
    return c;
  }
  std::string log_path() const { return dir_.path("s3rver.log"); }
  void kill() {
    if (pid_ < 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  void start() {
    const std::string data = dir_.path("data");
    std::filesystem::create_directories(data);
    std::vector<std::string> args{s3rver_path(),        "-d",   data, "-a", "127.0.0.1", "-p", "0",
                                  "--configure-bucket", bucket_};
    const std::string log = log_path();
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("s3_server: fork failed");
    if (pid == 0) {
      FILE* out = std::freopen(log.c_str(), "a", stdout);
      if (out) ::dup2(::fileno(stdout), 2);
      // s3rver's continuation tokens use DES, which OpenSSL 3 keeps in its legacy provider.
      ::setenv("NODE_OPTIONS", "--openssl-legacy-provider", 1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::fprintf(stderr, "cannot run %s\n", argv[0]);
      ::_exit(127);
    }
    pid_ = pid;
  }
  // Reaps the server and throws, naming its log, when it has exited before `what`.
  void throw_if_exited(const std::string& what) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return;
    pid_ = -1;
    throw std::runtime_error("s3rver exited before " + what + "; see " + log_path());
  }
  // The port of s3rver's "S3rver listening on 127.0.0.1:PORT" line, which it writes once it
  // listens (its bucket made); polls the log until it is there. Throws, naming the log, when the
  // server exits first or the deadline passes.
  int wait_for_port(std::chrono::steady_clock::time_point deadline) {
    const std::string marker = "S3rver listening on ";
    for (;;) {
      std::ifstream log(log_path());
      std::string line;
      while (std::getline(log, line)) {
        const auto at = line.find(marker);
        const auto colon = line.rfind(':');
        if (at != std::string::npos && colon != std::string::npos && colon > at)
          return std::stoi(line.substr(colon + 1));
      }
      throw_if_exited("it listened");
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("s3rver did not say its port in time (its log: " + log_path() + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // between reads of the log
    }
  }
  // Polls with a signed listing of the bucket until it succeeds (the server is up and has made
  // the bucket); throws, naming the log, when the server exits or the deadline passes.
  void wait_ready(std::chrono::steady_clock::time_point deadline) {
    auto c = config();
    c.max_attempts = 1;
    c.timeout = std::chrono::seconds(5);
    const core::storage::s3_client probe(c);
    for (;;) {
      try {
        probe.list_objects(bucket_, "");
        return;
      } catch (const core::storage::s3_error& e) {
        throw_if_exited("answering");
        if (std::chrono::steady_clock::now() > deadline)
          throw std::runtime_error(std::string("s3rver did not answer in time: ") + e.what() + " (its log: " +
                                   log_path() + ")");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // between polls of the server
      }
    }
  }

  temp_dir dir_;
  std::string bucket_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// The server's credentials in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for one scope, for code
// that reads the AWS environment (a job's workers, cohort-ckpt); what was there is put back after.
class s3_environment {
 public:
  s3_environment() = default;

 private:
  scoped_env id_{"AWS_ACCESS_KEY_ID", s3_server::access_key};
  scoped_env secret_{"AWS_SECRET_ACCESS_KEY", s3_server::secret_key};
};

}  // namespace cohort::test

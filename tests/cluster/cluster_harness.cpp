// Real cluster processes for the multi-process tests (see cluster_harness.hpp).
#include "tests/cluster/cluster_harness.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace cohort::test {

namespace {

std::string required_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    throw std::runtime_error(std::string("$") + name + " is not set (run the test through ctest)");
  return v;
}

// The port in the head's "cluster-head: serving on HOST:PORT (store ...)" line.
int served_port(const std::string& line) {
  static const std::regex served("serving on [^ ]*:([0-9]+) ");
  std::smatch m;
  if (!std::regex_search(line, m, served)) throw std::runtime_error("no port in: " + line);
  return std::stoi(m[1]);
}

}  // namespace

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

running_process::running_process(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& env) {
  child_ = std::make_unique<core::proc::child_process>(
      argv, env,
      [this](const std::string& line) {
        std::lock_guard<std::mutex> lock(mutex_);
        lines_.push_back(line);
      },
      [this](const core::proc::exit_status& s) {
        std::lock_guard<std::mutex> lock(mutex_);
        exit_code_ = s.signaled ? 128 + s.signal : s.code;
        ended_ = true;
      });
}

running_process::~running_process() {
  child_->signal(SIGTERM);
  wait_for_exit(std::chrono::seconds(10));
}

bool running_process::ended() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ended_;
}

int running_process::exit_code() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exit_code_;
}

std::string running_process::output() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  for (const auto& l : lines_) out += l + "\n";
  return out;
}

std::string running_process::wait_for_line(const std::string& text,
                                           std::chrono::milliseconds timeout) const {
  return wait_for_lines(text, 1, timeout).front();
}

std::vector<std::string> running_process::wait_for_lines(const std::string& text, std::size_t count,
                                                         std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<std::string> found;
      for (const auto& l : lines_)
        if (l.find(text) != std::string::npos && found.size() < count) found.push_back(l);
      if (found.size() == count) return found;
      if (ended_) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error(std::to_string(count) + " line(s) with \"" + text + "\" did not come; " +
                           "the output:\n" + output());
}

bool running_process::wait_for_exit(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ended()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ended();
}

// A port picked up front: the heads record it in the store, and clients that run before any
// head started get an address they can parse.
test_cluster::test_cluster() : bin_(required_env("COHORT_BIN")), port_(free_port()) {}

test_cluster::~test_cluster() {
  workers_.clear();
  head_.reset();
}

void test_cluster::start_head(const std::vector<std::string>& extra_args) {
  // A restarted head binds the port again. The first binds the port picked up front; where another
  // process took it since (it was free only a moment), the head gave the lease back and exited,
  // and one on a newly picked port takes over. (A head on port 0 would name ":0" in the store
  // until it bound.)
  for (int attempt = 1;; ++attempt) {
    head_ = start_other_head(port_, extra_args);
    try {
      port_ = served_port(head_->wait_for_line("serving on", std::chrono::seconds(30)));
      head_served_ = true;
      return;
    } catch (const std::runtime_error&) {
      const bool taken =
          head_->ended() && head_->output().find("Address already in use") != std::string::npos;
      if (head_served_ || !taken || attempt == 3) throw;
      port_ = free_port();
    }
  }
}

std::unique_ptr<running_process> test_cluster::start_other_head(int port,
                                                                const std::vector<std::string>& extra_args,
                                                                const std::vector<std::string>& place) {
  std::vector<std::string> argv{bin_ + "/cluster-head", "--store", store(), "--port",
                                std::to_string(port), "--heartbeat-timeout", "3", "--lease-ttl",
                                "3"};
  if (!etcd_location_.empty()) {
    argv[2] = etcd_location_;
    argv.insert(argv.end(), {"--keys-dir", store()});
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  argv.insert(argv.begin(), place.begin(), place.end());
  return std::make_unique<running_process>(argv, std::map<std::string, std::string>{});
}

void test_cluster::kill_head() {
  head_->kill(SIGKILL);
  head_->wait_for_exit(std::chrono::seconds(10));
}

running_process& test_cluster::start_worker(const std::string& name, int cpus, const std::string& resources,
                                            const std::vector<std::string>& extra_args,
                                            const std::string& working_dir,
                                            const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv{bin_ + "/cluster-worker", "--address", address(), "--credentials",
                                credentials(), "--name", name, "--num-cpus",
                                std::to_string(cpus)};
  if (!resources.empty()) {
    argv.push_back("--resources");
    argv.push_back(resources);
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  if (!working_dir.empty()) {
    // The shell changes directory, then becomes cluster-worker (same pid).
    argv.insert(argv.begin(), {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", working_dir});
  }
  auto& slot = workers_[name];
  slot = std::make_unique<running_process>(argv, env);
  slot->wait_for_line("joining", std::chrono::seconds(30));
  return *slot;
}

void test_cluster::kill_worker_process(const std::string& name) {
  auto& w = workers_.at(name);
  w->kill(SIGKILL);
  w->wait_for_exit(std::chrono::seconds(10));
}

command_result test_cluster::submit(const std::vector<std::string>& args,
                                    const std::map<std::string, std::string>& env_override) {
  return run("submit", args, env_override);
}

command_result test_cluster::run(const std::string& program, const std::vector<std::string>& args,
                                 const std::map<std::string, std::string>& env_override,
                                 std::chrono::seconds limit) {
  static int counter = 0;
  const std::string err_file = dir_.str() + "/" + program + "-" + std::to_string(++counter) + ".err";
  std::string cmd = "exec '" + bin_ + "/" + program + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>'" + err_file + "'";
  std::map<std::string, std::string> env{{"COHORT_ADDRESS", address_override_.empty() ? address() : address_override_},
                                         {"COHORT_CREDENTIALS", credentials()}};
  for (const auto& [k, v] : env_override) env[k] = v;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  command_result result;
  std::vector<std::string> argv{"/bin/sh", "-c", cmd};
  if (client_place_) {
    const auto place = client_place_();
    argv.insert(argv.begin(), place.begin(), place.end());
  }
  core::proc::child_process child(
      argv, env,
      [&](const std::string& line) {
        std::lock_guard<std::mutex> lock(m);
        result.out += line + "\n";
      },
      [&](const core::proc::exit_status& s) {
        std::lock_guard<std::mutex> lock(m);
        result.exit_code = s.signaled ? 128 + s.signal : s.code;
        done = true;
        cv.notify_all();
      });
  std::unique_lock<std::mutex> lock(m);
  if (!cv.wait_for(lock, limit, [&] { return done; }))
    throw std::runtime_error(program + " did not finish within " + std::to_string(limit.count()) + " s: " + cmd);
  result.err = read_file(err_file);
  return result;
}

nlohmann::json test_cluster::status(const std::string& job_id) {
  auto r = submit({"status", job_id, "--json"});
  if (r.exit_code != 0) throw std::runtime_error("submit status failed: " + r.err);
  return nlohmann::json::parse(r.out);
}

nlohmann::json test_cluster::wait_for(const std::string& job_id,
                                      const std::function<bool(const nlohmann::json&)>& pred,
                                      std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  nlohmann::json last;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = submit({"status", job_id, "--json"});
    if (r.exit_code == 0) {
      last = nlohmann::json::parse(r.out);
      if (pred(last)) return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  throw std::runtime_error("job " + job_id + " did not reach the awaited state; last status: " +
                           last.dump());
}

int test_cluster::worker_pid(const std::string& job_id, int rank, const std::string& node) {
  auto logs = submit({"logs", job_id});
  std::regex prefix("\\(worker rank=" + std::to_string(rank) + " node=" + node +
                    " pid=([0-9]+)\\)");
  int pid = -1;
  std::smatch m;
  std::istringstream in(logs.out);
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, m, prefix)) pid = std::stoi(m[1]);
  if (pid < 0) throw std::runtime_error("no output of rank " + std::to_string(rank) + " in logs");
  return pid;
}

std::string test_cluster::write_job(const std::string& json_text) {
  return dir_.write("job-" + std::to_string(++jobs_written_) + ".json", json_text);
}

std::string lr_job(const std::string& name, int workers, int steps, double step_delay_s,
                   int max_failures, const std::string& storage, const std::string& extra_scaling) {
  return R"({"name": ")" + name + R"(", "workload": "linear_regression",
    "scaling": {"num_workers": )" + std::to_string(workers) +
         R"(, "resources_per_worker": {"CPU": 1})" + extra_scaling + R"(},
    "train": {"micro_batch_size": 16, "max_steps": )" + std::to_string(steps) +
         R"(, "lr": 0.1, "seed": 5, "step_delay_s": )" + std::to_string(step_delay_s) + R"(},
    "run": {"storage_path": ")" + storage + R"(", "failure": {"max_failures": )" +
         std::to_string(max_failures) + "}}}";
}

}  // namespace cohort::test

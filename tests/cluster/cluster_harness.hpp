// Real cluster processes on 127.0.0.1 for the multi-process tests: a cluster-head on a fresh
// store, cluster-workers, and `submit` runs, started the way a user starts them (binaries from
// $COHORT_BIN). Conditions are awaited by polling `submit status` against a deadline.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/proc/child_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace cohort::test {

// A long-running process whose output is kept for inspection.
class running_process {
 public:
  running_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  ~running_process();
  pid_t pid() const { return child_->pid(); }
  void kill(int sig) { child_->signal(sig); }
  bool ended() const;
  std::string output() const;
  // Waits until a line containing `text` appeared; returns that line or throws after timeout.
  std::string wait_for_line(const std::string& text, std::chrono::milliseconds timeout) const;
  // Waits until `count` lines containing `text` appeared; returns them in order, or throws after
  // timeout.
  std::vector<std::string> wait_for_lines(const std::string& text, std::size_t count,
                                          std::chrono::milliseconds timeout) const;
  // Waits for the process to end; true if it did in time.
  bool wait_for_exit(std::chrono::milliseconds timeout) const;
  // Its exit code once it ended (128 + the signal that ended it), -1 before.
  int exit_code() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
  bool ended_ = false;
  int exit_code_ = -1;
  std::unique_ptr<core::proc::child_process> child_;
};

struct command_result {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

class test_cluster {
 public:
  test_cluster();
  ~test_cluster();

  // Starts (or restarts, on the same store and port) the head; extra_args: more cluster-head
  // options, e.g. {"--storage-root", DIR}. The first start binds the port picked when the cluster
  // was made, or a new one where another process took that one since; address() names it from
  // then on.
  void start_head(const std::vector<std::string>& extra_args = {});
  // Starts another cluster-head on the same store serving on `port`, without waiting for it
  // (a standby until the head's lease expires). `place`: a command prefix it runs under (e.g.
  // `ip netns exec NS`, a host of host_rig.hpp); none: here.
  std::unique_ptr<running_process> start_other_head(int port, const std::vector<std::string>& extra_args = {},
                                                    const std::vector<std::string>& place = {});
  // Heads started from now on keep their state in the etcd cluster at `location`
  // ("etcd://..."), with the cluster's keys under store() (so credentials() stays where it is).
  void use_etcd(const std::string& location) { etcd_location_ = location; }
  running_process& head() { return *head_; }
  void kill_head();
  // extra_args: more cluster-worker options, e.g. {"--memory", "1e6"}. working_dir: the directory
  // the cluster-worker (and so its worker processes) runs in; "" keeps the test's. env: variables
  // added to its environment.
  running_process& start_worker(const std::string& name, int cpus, const std::string& resources = "",
                                const std::vector<std::string>& extra_args = {},
                                const std::string& working_dir = "",
                                const std::map<std::string, std::string>& env = {});
  void kill_worker_process(const std::string& name);

  // Runs `submit ARGS...` with the cluster's address and credentials in the environment.
  command_result submit(const std::vector<std::string>& args,
                        const std::map<std::string, std::string>& env_override = {});
  // Runs one of the cluster's programs (`program` in $COHORT_BIN) to its end, with the same
  // environment as submit; throws when it has not ended within `limit`.
  command_result run(const std::string& program, const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env_override = {},
                     std::chrono::seconds limit = std::chrono::seconds(120));
  nlohmann::json status(const std::string& job_id);
  // Polls `submit status` until pred holds; returns the record, or throws with the last one.
  nlohmann::json wait_for(const std::string& job_id,
                          const std::function<bool(const nlohmann::json&)>& pred,
                          std::chrono::seconds timeout);
  // The pid of a job's worker of rank `rank` from `submit logs` (its line prefix), newest first.
  int worker_pid(const std::string& job_id, int rank, const std::string& node);

  // A job file in the test's directory; returns its path.
  std::string write_job(const std::string& json_text);
  std::string store() const { return dir_.str() + "/store"; }
  std::string credentials() const { return store() + "/cluster/credentials.json"; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The COHORT_ADDRESS that submit and run() pass from now on (e.g. a list of heads); "" for
  // address().
  void use_address(const std::string& addresses) { address_override_ = addresses; }
  // Where submit and run() run from now on: the command prefix `place` returns at each call (e.g.
  // `ip netns exec NS` of a host that reaches the heads); unset: here.
  void run_clients_in(std::function<std::vector<std::string>()> place) { client_place_ = std::move(place); }
  // The path of one of the cluster's programs ($COHORT_BIN/name).
  std::string program(const std::string& name) const { return bin_ + "/" + name; }
  const temp_dir& dir() const { return dir_; }

 private:
  temp_dir dir_{"cohort-cluster"};
  std::string bin_;
  int port_ = 0;
  bool head_served_ = false;  // a head of this cluster has served on port_
  std::string etcd_location_;
  std::string address_override_;
  std::function<std::vector<std::string>()> client_place_;
  std::unique_ptr<running_process> head_;
  std::map<std::string, std::unique_ptr<running_process>> workers_;
  int jobs_written_ = 0;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

// A linear-regression job spec (the built-in data-parallel workload).
std::string lr_job(const std::string& name, int workers, int steps, double step_delay_s,
                   int max_failures, const std::string& storage, const std::string& extra_scaling = "");

}  // namespace cohort::test

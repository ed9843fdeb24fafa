// cohort-chaos: seeded fault schedules against a real cluster on 127.0.0.1 (scripts/chaos runs
// it). Per schedule: two heads on one store (leader + standby), three cluster-workers, and a
// tiny-Llama job (2 ranks, CPU fp32, checkpoints every 3 steps, run.sample_log) held before each
// step where a fault is due (run.hold_before_steps), so every fault lands at a chosen step
// boundary however fast the machine is. Faults, drawn by a seeded RNG: kill -9 of the leader (a
// replacement standby is started), SIGSTOP of the leader past its lease then SIGCONT, kill -9 of
// the standby, kill -9 of a cluster-worker (restarted), kill -9 of a rank's process, kill -9 of
// rank 0 while it commits a checkpoint (every rank's files written, no COMMITTED yet; through
// COHORT_TEST_PAUSE_DIR), and SIGTERM of a cluster-worker (preemption; restarted once it left).
// With --store etcd the heads keep their state in a 3-member etcd cluster started per schedule
// (Debian's etcd binary), the nodes find the leader through it too, and two more faults are
// drawn: kill -9 of an etcd follower and kill -9 of the etcd leader (found through the members'
// status endpoint). The job is released to run on the two members left; the member is started
// again on its data dir at the next later hold (or once the job ended).
// With --hosts N (N >= 5) every process runs in a host of its own (a network namespace of
// tests/cluster/host_rig.hpp: the heads on hosts 0 and 1, the nodes on hosts 2..N-1, etcd's three
// members on hosts 0, 1 and 2; the directory store is the file system every host shares), and two
// partitions are drawn besides: a node's host cut off from every other host (healed once the job
// runs again without it), and the leading head's host cut off from every other host (on etcd its
// member goes with it: a standby on the other host takes over, and the old head must step down
// once healed; on a directory store the cut head keeps its lease and loses the nodes: healed, they
// come back to it).
// After each schedule: the job SUCCEEDED without a resubmission, its final checkpoint shards and
// exported weights are bitwise equal to an uninterrupted run's, the sample log replays the
// sampler exactly (each sample once per epoch), every checkpoint an attempt resumed from was
// committed, and `cohort-ckpt verify` passes on every checkpoint kept.
//
// Usage: cohort-chaos [--short] [--faults N] [--store dir|etcd] [--hosts N] [--keep-failures DIR]
//                     (--count N [--first-seed S] | SEED...)
// Needs $COHORT_BIN (the cluster's programs); --store etcd needs etcd on PATH, --hosts root and
// iproute2. Exit 0 when every schedule passed, 1 otherwise, 2 on bad usage, 77 (skipped) for
// --store etcd without etcd or --hosts where no network namespace can be made.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/data/dataset.hpp"
#include "core/data/sample_audit.hpp"
#include "core/store/cluster_store.hpp"
#include "tests/cluster/cluster_harness.hpp"
#include "tests/cluster/host_rig.hpp"
#include "tests/core/train/tiny_data.hpp"
#include "tests/support/etcd_cluster.hpp"
#include "tests/support/files.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using cohort::test::running_process;
using cohort::test::test_cluster;
using steady = std::chrono::steady_clock;

namespace {

namespace fs = std::filesystem;

enum class fault_kind {
  leader_kill,
  leader_stop,
  standby_kill,
  node_kill,
  rank_kill,
  commit_kill,
  node_term,
  etcd_follower_kill,
  etcd_leader_kill,
  node_cut,
  leader_cut
};
// What a schedule draws from: the process faults on either store (a directory store's schedules
// are those of before etcd came), then the etcd faults with --store etcd, then the partitions with
// --hosts.
std::vector<fault_kind> drawn_kinds(bool etcd, bool hosts) {
  std::vector<fault_kind> out{fault_kind::leader_kill, fault_kind::leader_stop, fault_kind::standby_kill,
                              fault_kind::node_kill,   fault_kind::rank_kill,   fault_kind::commit_kill,
                              fault_kind::node_term};
  if (etcd) out.insert(out.end(), {fault_kind::etcd_follower_kill, fault_kind::etcd_leader_kill});
  if (hosts) out.insert(out.end(), {fault_kind::node_cut, fault_kind::leader_cut});
  return out;
}

const char* name_of(fault_kind k) {
  switch (k) {
    case fault_kind::leader_kill: return "leader-kill9";
    case fault_kind::leader_stop: return "leader-sigstop";
    case fault_kind::standby_kill: return "standby-kill9";
    case fault_kind::node_kill: return "node-kill9";
    case fault_kind::rank_kill: return "rank-kill9";
    case fault_kind::commit_kill: return "commit-kill9";
    case fault_kind::node_term: return "node-sigterm";
    case fault_kind::etcd_follower_kill: return "etcd-follower-kill9";
    case fault_kind::etcd_leader_kill: return "etcd-leader-kill9";
    case fault_kind::node_cut:
      return "node-host-cut";
    case fault_kind::leader_cut:
      return "leader-host-cut";
  }
  return "?";
}

// The job's shape: steps, checkpoint interval; the data set has 96 samples, 8 per step.
struct job_shape {
  int epochs = 2;           // 12 steps each
  int every_steps = 3;
  int total_steps() const { return epochs * 12; }
};

struct fault {
  fault_kind kind;
  int step;  // the job is held before this step when the fault is injected
  int pick;  // which node or rank, where the fault has a choice
};

// A seeded schedule: `count` faults at strictly increasing hold steps in [2, total]; a commit
// kill at step k lands in the commit of the next checkpoint (the first multiple of every_steps
// >= k), so the next fault comes after that.
std::vector<fault> make_schedule(std::uint64_t seed, int count, const job_shape& shape, bool etcd,
                                 bool hosts) {
  const auto all_kinds = drawn_kinds(etcd, hosts);
  const std::size_t kinds = all_kinds.size();
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + 1);
  const int total = shape.total_steps();
  for (int tries = 0; tries < 1000; ++tries) {
    std::vector<fault> out;
    int at = 1;
    const int room = std::max(1, (total - 2) / count);
    for (int i = 0; i < count; ++i) {
      const auto kind = all_kinds[rng() % kinds];
      const int step = at + 1 + static_cast<int>(rng() % static_cast<unsigned>(room));
      out.push_back({kind, step, static_cast<int>(rng() % 2)});
      at = step;
      if (kind == fault_kind::commit_kill) at = (step + shape.every_steps - 1) / shape.every_steps * shape.every_steps;
    }
    if (at <= total) return out;
  }
  throw std::runtime_error("no schedule of " + std::to_string(count) + " faults fits " + std::to_string(total) + " steps");
}

std::string job_spec(const std::string& name, const std::string& data, const std::string& storage,
                     const job_shape& shape, const std::vector<int>& holds) {
  json spec = json::parse(R"({"workload": "causal_lm",
    "scaling": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
    "train": {"seq_len": 16, "micro_batch_size": 2, "grad_accum": 2, "lr": 0.01,
              "warmup_steps": 3, "schedule": "cosine", "seed": 3},
    "zero": {"stage": 2}})");
  spec["name"] = name;
  spec["model"] = {{"config", json::parse(cohort::test::tiny_llama_config())}, {"init_seed", 7}};
  spec["data"] = {{"train", data}};
  spec["train"]["epochs"] = shape.epochs;
  spec["run"] = {{"storage_path", storage},
                 {"sample_log", true},
                 // The driver releases a preempted attempt's hold itself: no grace deadline may race it.
                 {"failure", {{"max_failures", -1}, {"preemption_grace_s", 600}}},
                 {"checkpoint", {{"every_steps", shape.every_steps}}}};
  if (!holds.empty()) spec["run"]["hold_before_steps"] = holds;
  return spec.dump(2);
}

// The files whose bytes must match the uninterrupted run's: the final checkpoint's shards and
// the exported model's weights.
std::map<std::string, std::string> final_weights(const std::string& run_dir, int total_steps) {
  std::map<std::string, std::string> out;
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "step-%08d", total_steps);
  const std::string ckpt = run_dir + "/checkpoints/" + step_dir;
  for (const char* shard : {"rank-00000.safetensors", "rank-00001.safetensors"})
    out[std::string(step_dir) + "/" + shard] = cohort::test::read_file(ckpt + "/" + shard);
  for (const auto& e : fs::directory_iterator(run_dir + "/model"))
    if (e.path().extension() == ".safetensors")
      out["model/" + e.path().filename().string()] = cohort::test::read_file(e.path().string());
  if (out.size() < 3) throw std::runtime_error(run_dir + "/model holds no .safetensors file");
  return out;
}

double seconds_since(steady::time_point t) { return std::chrono::duration<double>(steady::now() - t).count(); }

std::string fixed(double v, int digits = 1) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(digits);
  o << v;
  return o.str();
}

bool running_held(const json& s) {
  return s.value("state", "") == "RUNNING" && s.value("held_before_step", 0) > 0 &&
         s.value("reason", "").rfind("head restarted", 0) != 0;  // adopted by the head answering
}

struct head_proc {
  int port = 0;
  std::unique_ptr<running_process> proc;
  int host = -1;  // with --hosts: the host it runs in
  std::string host_address = "127.0.0.1";
  std::string address() const { return host_address + ":" + std::to_string(port); }
};

struct recovery {
  fault f;
  double seconds = 0;
  std::string note;     // what the recovery looked like (new attempt, adopted, ...)
  double failover =
      -1;  // leader kill -9 (or its host cut off, on etcd): seconds until the standby said it serves
};

struct outcome {
  std::uint64_t seed = 0;
  std::vector<recovery> recoveries;
  bool ok = false;
  std::string error;
  double seconds = 0;
};

// One schedule's cluster: heads, nodes and the job.
class chaos_run {
 public:
  chaos_run(std::uint64_t seed, const job_shape& shape, std::vector<fault> faults, const std::string& data,
            const std::map<std::string, std::string>& baseline, bool etcd, int hosts)
      : seed_(seed),
        shape_(shape),
        faults_(std::move(faults)),
        data_(data),
        baseline_(baseline),
        on_etcd_(etcd),
        rig_(hosts > 0 ? std::make_unique<cohort::test::host_rig>(hosts) : nullptr),
        node_count_(hosts > 0 ? hosts - 2 : 3) {}

  outcome run() {
    outcome out;
    out.seed = seed_;
    const auto started = steady::now();
    try {
      setup();
      drive(out);
      check();
      out.ok = true;
    } catch (const std::exception& e) {
      out.error = e.what();
    }
    out.seconds = seconds_since(started);
    return out;
  }

  // Copies the store, the run directory and every process's output to `dir`.
  void keep(const std::string& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    fs::copy(c_.store(), dir + "/store", fs::copy_options::recursive, ec);
    fs::copy(run_dir(), dir + "/run", fs::copy_options::recursive, ec);
    int i = 0;
    for (const auto& h : heads_)
      if (h.proc) cohort::test::write_file(dir + "/head-" + std::to_string(i++) + ".log", h.proc->output());
    for (const auto& old : dead_) cohort::test::write_file(dir + "/dead-" + std::to_string(i++) + ".log", old->output());
    for (const auto& [name, n] : nodes_)
      if (n) cohort::test::write_file(dir + "/node-" + name + ".log", n->output());
    if (etcd_)
      for (int m = 0; m < etcd_->size(); ++m)
        fs::copy_file(etcd_->log_path(m), dir + "/etcd-m" + std::to_string(m) + ".log", ec);
    cohort::test::write_file(dir + "/job-logs.txt", c_.submit({"logs", id_}).out);
  }

 private:
  std::string run_dir() const { return c_.dir().str() + "/runs/chaos"; }
  std::string pause_dir() const { return c_.dir().str() + "/pause"; }

  void start_head(bool leader) {
    head_proc h;
    if (rig_) {  // on the head host (0 or 1) that has no head now, on the usual port
      h.host =
          std::any_of(heads_.begin(), heads_.end(), [](const head_proc& x) { return x.host == 0; }) ? 1 : 0;
      h.host_address = rig_->address(h.host);
      h.port = 7411;
      h.proc = c_.start_other_head(h.port, {"--bind", h.host_address}, rig_->exec_prefix(h.host));
    } else {
      h.port = cohort::test::free_port();
      h.proc = c_.start_other_head(h.port);
    }
    if (leader) {
      h.proc->wait_for_line("serving on", 60s);
    } else {
      h.proc->wait_for_line("waiting as a standby", 60s);
    }
    heads_.push_back(std::move(h));
    if (leader) leader_ = heads_.size() - 1;
    std::string list;
    for (const auto& x : heads_) list += (list.empty() ? "" : ",") + x.address();
    c_.use_address(list);
  }

  std::size_t standby() const {
    for (std::size_t i = 0; i < heads_.size(); ++i)
      if (i != leader_) return i;
    throw std::runtime_error("no standby head");
  }

  // Retires head i (its process kept for the logs) from the address list.
  void retire_head(std::size_t i) {
    dead_.push_back(std::move(heads_[i].proc));
    heads_.erase(heads_.begin() + static_cast<std::ptrdiff_t>(i));
    if (leader_ > i) --leader_;
  }

  // With --hosts, node nK runs on host K + 1.
  int node_host(const std::string& name) const { return 1 + std::stoi(name.substr(1)); }

  void start_node(const std::string& name) {
    std::string list;
    for (const auto& x : heads_) list += (list.empty() ? "" : ",") + x.address();
    if (auto& old = nodes_[name]) dead_.push_back(std::move(old));
    std::vector<std::string> argv{c_.program("cluster-worker"),
                                  "--address",
                                  list,
                                  "--credentials",
                                  c_.credentials(),
                                  "--name",
                                  name,
                                  "--num-cpus",
                                  "1"};
    if (on_etcd_) argv.insert(argv.end(), {"--store", store_location()});
    if (rig_) {
      argv.insert(argv.end(), {"--node-address", rig_->address(node_host(name))});
      const auto place = rig_->exec_prefix(node_host(name));
      argv.insert(argv.begin(), place.begin(), place.end());
    }
    nodes_[name] = std::make_unique<running_process>(
        argv, std::map<std::string, std::string>{{"COHORT_TEST_PAUSE_DIR", pause_dir()}});
    nodes_[name]->wait_for_line("joining", 60s);
  }

  void wait_for_nodes(std::size_t count) {
    const auto deadline = steady::now() + 120s;
    while (steady::now() < deadline) {
      const auto r = c_.submit({"list", "--json"});
      if (r.exit_code == 0 && json::parse(r.out)["nodes"].size() >= count) return;
      std::this_thread::sleep_for(200ms);
    }
    throw std::runtime_error("the nodes did not all register");
  }

  // With --hosts, where the driver's clients (submit, status, the store's lease) run: a head's host
  // that is not cut off, the leader's first; or the host pinned while the leader's is cut off from a
  // directory store (only from there does the leader answer).
  int client_host() const {
    if (pinned_client_ >= 0) return pinned_client_;
    if (leader_ < heads_.size() && heads_[leader_].host != cut_) return heads_[leader_].host;
    for (const auto& h : heads_)
      if (h.host != cut_) return h.host;
    return 0;
  }

  std::string store_location() const { return etcd_ ? etcd_->location("/chaos") : c_.store(); }

  // After an etcd fault: the head the store names as the live leader is leader_ (a head that lost
  // its lease while etcd had no leader has handed over and exits: it is retired and a standby
  // started in its place).
  void sync_heads() {
    const auto store = cohort::core::store::open_cluster_store(store_location());
    const auto deadline = steady::now() + 120s;
    for (;;) {
      std::optional<cohort::core::store::lease_record> held;
      const auto read = [&] {
        try {
          held = store->lease().current();
        } catch (const std::exception&) {
        }
      };
      if (rig_)
        rig_->in_host(client_host(), read);
      else
        read();
      if (held && !held->expired_at(cohort::core::store::system_clock_ms())) {
        const auto it = std::find_if(heads_.begin(), heads_.end(),
                                     [&](const head_proc& h) { return h.address() == held->address; });
        if (it != heads_.end() && !it->proc->ended()) {
          leader_ = static_cast<std::size_t>(it - heads_.begin());
          break;
        }
      }
      if (steady::now() > deadline) throw std::runtime_error("no head of this run leads in " + store_location());
      std::this_thread::sleep_for(100ms);
    }
    for (std::size_t i = heads_.size(); i-- > 0;)
      if (i != leader_ && heads_[i].proc->ended()) retire_head(i);
    while (heads_.size() < 2) start_head(false);
  }

  // The etcd member that leads now, asked of the members running; waits for an election.
  int etcd_leader() {
    const auto deadline = steady::now() + 60s;
    for (;;) {
      const int m = etcd_->leader();
      if (m >= 0) return m;
      if (steady::now() > deadline) throw std::runtime_error("the etcd cluster elected no leader within 60 s");
      std::this_thread::sleep_for(100ms);
    }
  }

  // Starts the etcd member killed by the last etcd fault again on its data dir, if one is down.
  void restore_etcd_member() {
    if (down_member_ < 0) return;
    etcd_->restart(down_member_);
    down_member_ = -1;
  }

  void setup() {
    if (on_etcd_) {
      etcd_ = rig_
                  ? std::make_unique<cohort::test::etcd_cluster>(cohort::test::etcd_member_hosts(*rig_, 0, 3))
                  : std::make_unique<cohort::test::etcd_cluster>(3);
      c_.use_etcd(store_location());
    }
    if (rig_) c_.run_clients_in([this] { return rig_->exec_prefix(client_host()); });
    fs::create_directories(pause_dir());
    start_head(true);
    start_head(false);
    for (int n = 1; n <= node_count_; ++n) start_node("n" + std::to_string(n));
    wait_for_nodes(static_cast<std::size_t>(node_count_));
    std::vector<int> holds;
    for (const auto& f : faults_) holds.push_back(f.step);
    const auto run = c_.submit({"run", c_.write_job(job_spec("chaos", data_, c_.dir().str() + "/runs", shape_, holds))});
    if (run.exit_code != 0) throw std::runtime_error("submit run failed: " + run.err);
    id_ = run.out.substr(0, run.out.find('\n'));
  }

  json wait(const std::function<bool(const json&)>& pred, std::chrono::seconds timeout, const std::string& what) {
    try {
      return c_.wait_for(id_, pred, timeout);
    } catch (const std::exception& e) {
      throw std::runtime_error("waiting for " + what + ": " + e.what());
    }
  }

  void release(int step, int attempt) {
    const auto r = c_.submit({"release", id_});
    if (r.exit_code != 0) throw std::runtime_error("submit release at step " + std::to_string(step) + ": " + r.err);
    // Until the release shows, the status still says held here: never release one hold twice.
    wait([&](const json& s) {
      return s["state"] != "RUNNING" || s["attempts"] != attempt || s["held_before_step"] != step;
    }, 120s, "the release of step " + std::to_string(step));
  }

  void drive(outcome& out) {
    std::size_t next = 0;
    while (true) {
      const auto s = wait([](const json& s) {
        return s["state"] == "SUCCEEDED" || s["state"] == "FAILED" || running_held(s);
      }, 300s, "a hold or the end");
      if (s["state"] != "RUNNING") {
        restore_etcd_member();
        if (s["state"] != "SUCCEEDED") throw std::runtime_error("the job ended " + s.dump());
        if (next != faults_.size())
          throw std::runtime_error("the job ended before fault " + std::to_string(next + 1) + " was injected");
        return;
      }
      const int step = s["held_before_step"];
      const int attempt = s["attempts"];
      // A member killed at an earlier hold comes back at a later one: the steps between ran
      // on the two members left.
      if (down_member_ >= 0 && step > down_since_step_) restore_etcd_member();
      if (next < faults_.size() && faults_[next].step == step) {
        out.recoveries.push_back(inject(faults_[next], s));
        ++next;
      } else {
        release(step, attempt);
      }
    }
  }

  // The pid of the cohort-worker of rank `rank` under node `name`'s cluster-worker (from /proc:
  // the job's log may have lost lines in a head failover); the newest when several are (a rank of
  // an attempt given up may not have ended yet).
  int rank_pid(const std::string& name, int rank) {
    int newest = -1;
    unsigned long long newest_start = 0;
    const pid_t parent = nodes_.at(name)->pid();
    const std::string want = std::string("--rank") + '\0' + std::to_string(rank) + '\0';
    for (const auto& e : fs::directory_iterator("/proc")) {
      const auto pid_text = e.path().filename().string();
      if (pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(e.path() / "stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      const auto close = line.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 2));
      char state = 0;
      int ppid = 0;
      if (!(rest >> state >> ppid) || ppid != parent) continue;
      std::string skip;
      for (int field = 5; field < 22; ++field) rest >> skip;  // to starttime, field 22 of stat
      unsigned long long start = 0;
      rest >> start;
      std::ifstream cmd(e.path() / "cmdline");
      const std::string argv((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
      if (argv.find("cohort-worker") == std::string::npos || argv.find(want) == std::string::npos) continue;
      if (newest < 0 || start > newest_start) {
        newest = std::stoi(pid_text);
        newest_start = start;
      }
    }
    if (newest >= 0) return newest;
    throw std::runtime_error("no cohort-worker of rank " + std::to_string(rank) + " under node " + name);
  }

  // The node rank `rank` runs on, from the status.
  static std::string node_of(const json& s, int rank) { return s["rank_nodes"].at(rank).get<std::string>(); }

  void kill_node(const std::string& name, int sig, std::string& note) {
    nodes_.at(name)->kill(sig);
    wait_gone(name, sig, note);
  }

  // Waits for node `name`'s cluster-worker to exit after `sig`; kills it past the allowance.
  void wait_gone(const std::string& name, int sig, std::string& note) {
    auto& n = nodes_.at(name);
    if (!n->wait_for_exit(sig == SIGTERM ? 120s : 30s)) {
      note += "; did not exit on SIGTERM within 120 s, killed";
      n->kill(SIGKILL);
      n->wait_for_exit(30s);
    }
  }

  recovery inject(const fault& f, const json& held) {
    recovery r{f, 0, ""};
    const int step = f.step;
    const int attempt = held["attempts"];
    const auto t0 = steady::now();
    bool restarts = true;  // the fault ends the attempt
    switch (f.kind) {
      case fault_kind::leader_kill:
      case fault_kind::leader_stop: {
        restarts = false;
        const auto old = leader_;
        const auto next = standby();
        heads_[old].proc->kill(f.kind == fault_kind::leader_kill ? SIGKILL : SIGSTOP);
        heads_[next].proc->wait_for_line("serving on", 120s);
        if (f.kind == fault_kind::leader_kill) {
          r.failover = seconds_since(t0);
          r.note = "standby serving after " + fixed(r.failover, 2) + " s";
        }
        leader_ = next;
        if (f.kind == fault_kind::leader_stop) {
          heads_[old].proc->kill(SIGCONT);
          if (!heads_[old].proc->wait_for_exit(120s)) throw std::runtime_error("the woken leader did not step down");
        }
        heads_[old].proc->wait_for_exit(30s);
        retire_head(old);
        start_head(false);  // two heads again
        break;
      }
      case fault_kind::standby_kill: {
        restarts = false;
        const auto s = standby();
        heads_[s].proc->kill(SIGKILL);
        heads_[s].proc->wait_for_exit(30s);
        retire_head(s);
        start_head(false);
        break;
      }
      case fault_kind::node_kill: {
        const auto name = node_of(held, f.pick);
        r.note = name;
        kill_node(name, SIGKILL, r.note);
        start_node(name);
        break;
      }
      case fault_kind::node_term: {
        // A preemption notice: once the head marks the attempt preempted, the released attempt
        // runs the held step, commits it as an emergency checkpoint and stops; the next attempt
        // resumes after it on the other nodes, and the node leaves once its rank is gone.
        const auto name = node_of(held, f.pick);
        r.note = name;
        nodes_.at(name)->kill(SIGTERM);
        wait([&](const json& s) {
          return s["reason"].get<std::string>().rfind("preempting attempt", 0) == 0;
        }, 120s, "the preemption notice of " + name);
        release(step, attempt);
        wait_gone(name, SIGTERM, r.note);
        start_node(name);
        // No step lost: the preempted attempt saved the step it was released into.
        const auto said = "emergency checkpoint of step " + std::to_string(step) + " committed";
        const auto deadline = steady::now() + 120s;
        while (c_.submit({"logs", id_}).out.find(said) == std::string::npos) {
          if (steady::now() > deadline)
            throw std::runtime_error("after SIGTERM of " + name + " the logs never said \"" + said + "\"");
          std::this_thread::sleep_for(200ms);
        }
        r.note += "; emergency checkpoint of step " + std::to_string(step);
        break;
      }
      case fault_kind::rank_kill: {
        const int pid = rank_pid(node_of(held, f.pick), f.pick);
        r.note = "rank " + std::to_string(f.pick) + " pid " + std::to_string(pid);
        if (::kill(pid, SIGKILL) != 0) throw std::runtime_error("cannot kill rank " + std::to_string(f.pick));
        break;
      }
      case fault_kind::etcd_follower_kill:
      case fault_kind::etcd_leader_kill: {
        // Two etcd faults at once would cost etcd its quorum: the one down comes back first.
        restore_etcd_member();
        const int lead = etcd_leader();
        const int victim = f.kind == fault_kind::etcd_leader_kill ? lead : (lead + 1 + f.pick) % etcd_->size();
        r.note = std::string(f.kind == fault_kind::etcd_leader_kill ? "leader" : "follower") + " m" +
                 std::to_string(victim);
        const auto t_kill = steady::now();
        etcd_->kill(victim);
        down_member_ = victim;
        down_since_step_ = step;
        if (f.kind == fault_kind::etcd_leader_kill) r.note += ", then m" + std::to_string(etcd_leader()) + " led";
        // Recovered once a leading head answers that the job is still held here (or, had the
        // head lost its lease meanwhile, held again after the failover).
        const auto s = wait([&](const json& s) { return running_held(s); }, 300s,
                            "the job held again after " + std::string(name_of(f.kind)));
        r.seconds = seconds_since(t_kill);
        sync_heads();
        if (s["attempts"] > attempt) {
          r.note += "; the attempt was restarted";
          unadopted_ = true;
        }
        return r;
      }
      case fault_kind::node_cut:
        return cut_node(f, held, t0);
      case fault_kind::leader_cut:
        return cut_leader(f, held, t0);
      case fault_kind::commit_kill: {
        const int ckpt = (step + shape_.every_steps - 1) / shape_.every_steps * shape_.every_steps;
        char name[40];
        std::snprintf(name, sizeof name, "commit-step-%08d", ckpt);
        const std::string arm = pause_dir() + "/" + name + ".arm", paused = pause_dir() + "/" + name + ".paused";
        cohort::test::write_file(arm, "");
        release(step, attempt);
        const auto deadline = steady::now() + 300s;
        while (::access(paused.c_str(), F_OK) != 0) {
          if (steady::now() > deadline) throw std::runtime_error("rank 0 never paused in the commit of " + std::string(name));
          std::this_thread::sleep_for(20ms);
        }
        const int pid = std::stoi(cohort::test::read_file(paused));
        char dir[32];
        std::snprintf(dir, sizeof dir, "/step-%08d", ckpt);
        const std::string ckpt_dir = run_dir() + "/checkpoints" + dir;
        if (::access((ckpt_dir + "/COMMITTED").c_str(), F_OK) == 0)
          throw std::runtime_error(ckpt_dir + " was committed before the commit's pause point");
        r.note = "step " + std::to_string(ckpt) + ", rank 0 pid " + std::to_string(pid);
        const auto t_kill = steady::now();
        if (::kill(pid, SIGKILL) != 0) throw std::runtime_error("cannot kill rank 0 in its commit");
        fs::remove(arm);
        fs::remove(paused);
        wait([&](const json& s) { return s["attempts"] > attempt && running_held(s); }, 300s,
             "the attempt after " + std::string(name_of(f.kind)));
        r.seconds = seconds_since(t_kill);
        r.note += "; attempt " + std::to_string(attempt) + " -> " + c_.status(id_)["attempts"].dump();
        return r;
      }
    }
    const auto s = wait([&](const json& s) {
      // A preempted attempt saved the held step, so after the last hold its successor holds no
      // more and may finish the job before it is seen running.
      if (f.kind == fault_kind::node_term && s["state"] == "SUCCEEDED") return s["attempts"] > attempt;
      if (!running_held(s)) return false;
      return restarts ? s["attempts"] > attempt : (s["attempts"] > attempt || s["held_before_step"] == step);
    }, 300s, "recovery from " + std::string(name_of(f.kind)));
    r.seconds = seconds_since(t0);
    if (!restarts && s["attempts"] > attempt) {
      r.note += (r.note.empty() ? "" : "; ") + std::string("the attempt was restarted, not adopted");
      unadopted_ = true;
    }
    if (restarts)
      r.note += (r.note.empty() ? "" : "; ") + ("attempt " + std::to_string(attempt) + " -> " + s["attempts"].dump());
    return r;
  }

  // Waits until node `name` is listed again after its host was healed (started again should its
  // cluster-worker have given up meanwhile).
  void wait_for_node_back(const std::string& name) {
    std::string last;
    const auto listed = [&] {
      const auto r = c_.submit({"list", "--json"});
      last = r.out + r.err;
      if (r.exit_code != 0) return false;
      const auto list = json::parse(r.out);
      for (const auto& n : list["nodes"])
        if (n["name"] == name) return true;
      return false;
    };
    const auto deadline = steady::now() + 120s;
    while (!listed()) {
      if (nodes_.at(name)->ended()) start_node(name);
      if (steady::now() > deadline)
        throw std::runtime_error(name +
                                 " did not join again within 120 s of the heal; the last list: " + last);
      std::this_thread::sleep_for(200ms);
    }
  }

  // The host of rank f.pick's node cut off from every other host: the head loses the node at the
  // heartbeat timeout and restarts the attempt on the nodes left; then the host is healed and the
  // node joins again.
  recovery cut_node(const fault& f, const json& held, steady::time_point t0) {
    recovery r{f, 0, ""};
    const int attempt = held["attempts"];
    const auto name = node_of(held, f.pick);
    const int host = node_host(name);
    r.note = name + " on host " + std::to_string(host);
    rig_->cut(host);
    cut_ = host;
    const auto s = wait([&](const json& s) { return s["attempts"] > attempt && running_held(s); }, 300s,
                        "the attempt after " + name + "'s host was cut off");
    r.seconds = seconds_since(t0);
    rig_->heal(host);
    cut_ = -1;
    wait_for_node_back(name);
    r.note += "; attempt " + std::to_string(attempt) + " -> " + s["attempts"].dump() + "; healed, " + name +
              " joined again";
    return r;
  }

  // The leading head's host cut off from every other host. On etcd its member goes with it: the
  // two left keep the quorum, the lease runs out, the standby on the other head host takes over
  // and the job goes on under it; healed, the old head must step down (it exits). On a directory
  // store the cut head still reaches the store (the shared file system) and keeps its lease: it
  // loses the nodes, the job waits, and once healed the nodes come back and the job goes on.
  recovery cut_leader(const fault& f, const json& held, steady::time_point t0) {
    recovery r{f, 0, ""};
    const int attempt = held["attempts"];
    const int step = f.step;
    const auto old = leader_;
    const int host = heads_[old].host;
    r.note = "host " + std::to_string(host);
    if (!on_etcd_) {
      pinned_client_ = host;  // only there does the cut leader answer
      rig_->cut(host);
      cut_ = host;
      wait([](const json& s) { return s["state"] == "PENDING"; }, 300s,
           "the job waiting once the cut leader lost its nodes");
      rig_->heal(host);
      cut_ = -1;
      pinned_client_ = -1;
      const auto s = wait([&](const json& s) { return s["attempts"] > attempt && running_held(s); }, 300s,
                          "the attempt after the leader's host was healed");
      r.seconds = seconds_since(t0);
      for (int n = 1; n <= node_count_; ++n) wait_for_node_back("n" + std::to_string(n));
      r.note +=
          "; the job waited; healed, attempt " + std::to_string(attempt) + " -> " + s["attempts"].dump();
      return r;
    }
    const auto next = standby();
    rig_->cut(host);
    cut_ = host;
    heads_[next].proc->wait_for_line("serving on", 120s);
    r.failover = seconds_since(t0);
    r.note += "; standby serving after " + fixed(r.failover, 2) + " s";
    leader_ = next;
    const auto s = wait(
        [&](const json& s) {
          return running_held(s) && (s["attempts"] > attempt || s["held_before_step"] == step);
        },
        300s, "the job under the standby after the leader's host was cut off");
    r.seconds = seconds_since(t0);
    if (s["attempts"] > attempt) {
      r.note += "; the attempt was restarted, not adopted";
      unadopted_ = true;
    }
    rig_->heal(host);
    cut_ = -1;
    if (!heads_[old].proc->wait_for_exit(120s))
      throw std::runtime_error("the leader cut off with its etcd member did not step down once healed");
    retire_head(old);
    start_head(false);
    return r;
  }

  void check() {
    const auto s = c_.status(id_);
    if (s["state"] != "SUCCEEDED") throw std::runtime_error("job not SUCCEEDED: " + s.dump());
    const auto list = json::parse(c_.submit({"list", "--json"}).out);
    if (list["jobs"].size() != 1) throw std::runtime_error("the cluster lists " + list["jobs"].dump());
    // Bitwise equal to the uninterrupted run.
    const auto got = final_weights(run_dir(), shape_.total_steps());
    for (const auto& [file, bytes] : baseline_) {
      const auto it = got.find(file);
      if (it == got.end()) throw std::runtime_error(file + " is missing");
      if (it->second != bytes) throw std::runtime_error(file + " differs from the uninterrupted run's");
    }
    // The sample log against the sampler.
    std::vector<std::vector<cohort::core::data::sample_log_line>> logs;
    for (int r = 0; r < 2; ++r)
      logs.push_back(cohort::core::data::read_sample_log(run_dir() + "/samples/rank-" + std::to_string(r) + ".jsonl"));
    const cohort::core::data::dataset data(data_);
    const auto audit = cohort::core::data::audit_sample_logs(logs, static_cast<std::int64_t>(data.size()),
                                                             {2, 2, 2}, 3, shape_.total_steps());
    if (!audit.ok()) {
      std::string all;
      for (const auto& e : audit.errors) all += "\n  " + e;
      throw std::runtime_error("sample log:" + all);
    }
    // Every resume was from a committed checkpoint, and the workers said which.
    const auto job_logs = c_.submit({"logs", id_}).out;
    for (const auto& rank : audit.resumes) {
      for (const auto& [attempt, after] : rank) {
        if (after == 0) continue;
        char dir[32];
        std::snprintf(dir, sizeof dir, "step-%08lld", static_cast<long long>(after));
        const std::string path = run_dir() + "/checkpoints/" + dir;
        if (::access((path + "/COMMITTED").c_str(), F_OK) != 0)
          throw std::runtime_error("attempt " + std::to_string(attempt + 1) + " resumed after step " +
                                   std::to_string(after) + ", but " + path + " is not committed");
        if (job_logs.find("resuming from " + path) == std::string::npos)
          throw std::runtime_error("attempt " + std::to_string(attempt + 1) + " resumed after step " +
                                   std::to_string(after) + " and no worker said \"resuming from " + path + "\"");
      }
    }
    std::istringstream lines(job_logs);
    for (std::string line; std::getline(lines, line);) {
      const auto at = line.find("resuming from ");
      if (at == std::string::npos) continue;
      const auto path = line.substr(at + 14);
      if (::access((path + "/COMMITTED").c_str(), F_OK) != 0)
        throw std::runtime_error("a worker resumed from " + path + ", which has no COMMITTED");
    }
    // Every kept checkpoint verifies.
    int kept = 0;
    for (const auto& e : fs::directory_iterator(run_dir() + "/checkpoints")) {
      const auto v = c_.run("cohort-ckpt", {"verify", e.path().string()});
      if (v.exit_code != 0)
        throw std::runtime_error("cohort-ckpt verify " + e.path().string() + ": " + v.out + v.err);
      ++kept;
    }
    if (kept < shape_.total_steps() / shape_.every_steps)
      throw std::runtime_error("only " + std::to_string(kept) + " checkpoints kept");
  }

  std::uint64_t seed_;
  job_shape shape_;
  std::vector<fault> faults_;
  std::string data_;
  const std::map<std::string, std::string>& baseline_;
  bool on_etcd_;
  // With --hosts: every process's host. Declared first of what holds processes: its teardown
  // (every process in its namespaces killed, the namespaces deleted) comes after theirs.
  std::unique_ptr<cohort::test::host_rig> rig_;
  int node_count_;
  int cut_ = -1;            // the host cut off now
  int pinned_client_ = -1;  // the host the driver's clients must run in now, if any
  // Declared before the cluster: destroyed after every head and node is gone.
  std::unique_ptr<cohort::test::etcd_cluster> etcd_;
  int down_member_ = -1;       // the etcd member an etcd fault killed, until it is started again
  int down_since_step_ = 0;    // the hold it was killed at
  test_cluster c_;
  std::vector<head_proc> heads_;
  std::size_t leader_ = 0;
  std::map<std::string, std::unique_ptr<running_process>> nodes_;
  std::vector<std::unique_ptr<running_process>> dead_;
  std::string id_;
  bool unadopted_ = false;
};

// The uninterrupted run: one head, two nodes, the same job without holds.
std::map<std::string, std::string> run_baseline(const std::string& data, const job_shape& shape) {
  test_cluster c;
  c.start_head();
  c.start_worker("b1", 1);
  c.start_worker("b2", 1);
  const auto run = c.submit({"run", c.write_job(job_spec("chaos", data, c.dir().str() + "/runs", shape, {})), "--follow"});
  if (run.exit_code != 0) throw std::runtime_error("the uninterrupted run failed: " + run.out + run.err);
  return final_weights(c.dir().str() + "/runs/chaos", shape.total_steps());
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

int usage(const std::string& why) {
  std::cerr
      << "cohort-chaos: " << why
      << "\nusage: cohort-chaos [--short] [--faults N] [--store dir|etcd] [--hosts N] [--keep-failures DIR]\n"
         "                    (--count N [--first-seed S] | SEED...)\n"
         "  --short           a one-epoch job (12 steps) instead of two (24): CI's schedules\n"
         "  --faults N        faults per schedule (default 5)\n"
         "  --store S         where the heads keep their state: dir (a shared directory, the\n"
         "                    default) or etcd (a 3-member etcd cluster on 127.0.0.1 per schedule;\n"
         "                    adds kill -9 of an etcd follower and of the etcd leader)\n"
         "  --hosts N         every process in a host of its own (N >= 5 network namespaces: heads\n"
         "                    on hosts 0 and 1, nodes on 2..N-1, etcd on 0-2); adds a node's host\n"
         "                    and the leader's host cut off from the others, then healed (root)\n"
         "  --keep-failures D copy a failed schedule's store, run and process logs to D/seed-N\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::uint64_t> seeds;
  job_shape shape;
  int faults = 5, count = 0, hosts = 0;
  std::uint64_t first_seed = 1;
  std::string keep, store = "dir";
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--short") shape.epochs = 1;
      else if (a == "--faults") faults = std::stoi(value());
      else if (a == "--count") count = std::stoi(value());
      else if (a == "--first-seed") first_seed = std::stoull(value());
      else if (a == "--keep-failures") keep = value();
      else if (a == "--store") store = value();
      else if (a == "--hosts")
        hosts = std::stoi(value());
      else if (a == "-h" || a == "--help") return usage("runs seeded fault schedules against a cluster on 127.0.0.1");
      else if (!a.empty() && std::isdigit(static_cast<unsigned char>(a[0]))) seeds.push_back(std::stoull(a));
      else return usage("unknown argument \"" + a + "\"");
    }
  } catch (const std::exception& e) {
    return usage(e.what());
  }
  if (faults < 1 || faults > 8) return usage("--faults must be 1 to 8");
  if (store != "dir" && store != "etcd") return usage("--store " + store + ": allowed are dir and etcd");
  if (hosts != 0 && (hosts < 5 || hosts > 64))
    return usage("--hosts must be 5 to 64 (two heads and at least three nodes)");
  const bool on_etcd = store == "etcd";
  if (hosts > 0) {
    if (const auto why = cohort::test::host_rig::unavailable_reason(); !why.empty()) {
      std::cout << "cohort-chaos: skipped: --hosts needs network namespaces: " << why << std::endl;
      return 77;
    }
  }
  if (on_etcd && std::system("command -v etcd >/dev/null 2>&1") != 0) {
    std::cout << "cohort-chaos: skipped: --store etcd needs the etcd binary on PATH (Debian's "
                 "etcd-server; scripts/install-deps --tests installs it)" << std::endl;
    return 77;
  }
  for (int i = 0; i < count; ++i) seeds.push_back(first_seed + static_cast<std::uint64_t>(i));
  if (seeds.empty()) return usage("no seeds: give SEED... or --count N");

  cohort::test::temp_dir data_dir("cohort-chaos-data");
  const auto data = cohort::test::make_tiny_dataset(data_dir.str() + "/data");
  const auto t0 = steady::now();
  std::map<std::string, std::string> baseline;
  try {
    baseline = run_baseline(data, shape);
  } catch (const std::exception& e) {
    std::cerr << "cohort-chaos: " << e.what() << "\n";
    return 1;
  }
  std::cout << "store: "
            << (on_etcd ? (hosts > 0 ? "etcd (3 members on hosts 0-2 per schedule)"
                                     : "etcd (3 members on 127.0.0.1 per schedule)")
                        : "a shared directory")
            << "\n";
  if (hosts > 0)
    std::cout << "hosts: " << hosts << " network namespaces per schedule (heads on 0 and 1, nodes on 2-"
              << hosts - 1 << ")\n";
  std::cout << "baseline: " << shape.total_steps() << " steps uninterrupted in " << fixed(seconds_since(t0))
            << " s; " << baseline.size() << " weight files to match" << std::endl;

  std::vector<double> ttr;
  std::map<std::string, std::vector<double>> failovers;  // by the fault that caused them
  int failed = 0, injected = 0;
  std::map<std::string, std::vector<double>> by_kind;
  for (const auto seed : seeds) {
    const auto schedule = make_schedule(seed, faults, shape, on_etcd, hosts > 0);
    chaos_run run(seed, shape, schedule, data, baseline, on_etcd, hosts);
    const auto out = run.run();
    std::ostringstream line;
    line << "seed " << seed << ": faults";
    for (const auto& f : schedule) line << " " << name_of(f.kind) << "@" << f.step;
    line << "; recoveries " << out.recoveries.size() << ":";
    for (const auto& r : out.recoveries) {
      line << " " << name_of(r.f.kind) << "@" << r.f.step << " " << fixed(r.seconds) << "s";
      if (!r.note.empty()) line << " (" << r.note << ")";
      ttr.push_back(r.seconds);
      if (r.failover >= 0) failovers[name_of(r.f.kind)].push_back(r.failover);
      by_kind[name_of(r.f.kind)].push_back(r.seconds);
    }
    injected += static_cast<int>(out.recoveries.size());
    line << "; " << fixed(out.seconds) << " s; " << (out.ok ? "ok" : "FAILED: " + out.error);
    std::cout << line.str() << std::endl;
    if (!out.ok) {
      ++failed;
      if (!keep.empty()) {
        run.keep(keep + "/seed-" + std::to_string(seed));
        std::cout << "  kept in " << keep << "/seed-" << seed << std::endl;
      }
    }
  }
  std::cout << "summary: " << seeds.size() << " schedules, " << injected << " faults injected, " << ttr.size()
            << " recoveries, time to recover p50 " << fixed(percentile(ttr, 0.5)) << " s, p99 "
            << fixed(percentile(ttr, 0.99)) << " s, max " << fixed(percentile(ttr, 1.0)) << " s; " << failed
            << " failed; " << fixed(seconds_since(t0)) << " s in all" << std::endl;
  for (const auto& [kind, v] : by_kind)
    std::cout << "  " << kind << ": " << v.size() << ", p50 " << fixed(percentile(v, 0.5)) << " s, max "
              << fixed(percentile(v, 1.0)) << " s" << std::endl;
  for (const auto& [kind, v] : failovers)
    std::cout << "head failover after " << kind << " (until the standby serves): " << v.size() << ", p50 "
              << fixed(percentile(v, 0.5), 2) << " s, p99 " << fixed(percentile(v, 0.99), 2) << " s, min "
              << fixed(*std::min_element(v.begin(), v.end()), 2) << " s, max " << fixed(percentile(v, 1.0), 2)
              << " s" << std::endl;
  return failed == 0 ? 0 : 1;
}

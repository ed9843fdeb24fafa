// cohort-sim: N simulated nodes in one process against a real cluster-head, each on its own CURVE
// link (the real node gateway, hello and heartbeats), answering start_trainer as a trainer would;
// reports the head's CPU, placement and client latencies and the store's write rate.
//
// Threads: main() drives the run; one submitter thread and one querier thread each own a
// cluster_client; the simulated nodes and trainers are CAF actors of one actor system; each node's
// wire_client has its own loop thread. sim_shared is the only state they share (under its mutex).
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>
#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "actors/bridge.hpp"
#include "actors/gateways.hpp"
#include "actors/scheduler_config.hpp"
#include "core/proc/child_process.hpp"
#include "net/credentials.hpp"
#include "tools/cluster_client.hpp"
#include "tools/command_line.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace cohort;
using steady = std::chrono::steady_clock;

namespace {

// What the simulated nodes and the driver threads share.
struct sim_shared {
  std::mutex mutex;
  std::map<std::string, steady::time_point> submitted;  // job id -> submit request sent
  std::map<std::string, steady::time_point> placed;     // job id -> first start_trainer seen
  std::atomic<std::uint64_t> start_trainers{0};
  std::atomic<std::uint64_t> outcomes_acked{0};
  int progress_reports = 3;
};

// A trainer as the head sees one: started, running, a few progress reports, success; it ends
// once the head took the outcome (outcome_ack).
caf::behavior sim_trainer(caf::event_based_actor* self, actors::trainer_setup setup, caf::actor head,
                          std::shared_ptr<sim_shared> shared) {
  self->set_default_handler(caf::drop);
  self->send(head, actors::trainer_started{setup.job_id, setup.attempt});
  self->send(head, actors::attempt_running{setup.job_id, setup.attempt});
  const int steps = shared->progress_reports;
  for (int step = 1; step <= steps; ++step) {
    actors::progress_report r;
    r.job_id = setup.job_id;
    r.rank = 0;
    r.step = step;
    r.total_steps = steps;
    r.loss = 1.0 / step;
    r.attempt = setup.attempt;
    self->send(head, r);
  }
  self->send(head, actors::attempt_outcome{setup.job_id, setup.attempt, true, {}});
  return {
      [=](const actors::outcome_ack& ack) {
        if (ack.job_id != setup.job_id || ack.attempt != setup.attempt) return;
        ++shared->outcomes_acked;
        self->quit();
      },
      [=](actors::reintroduce) {
        self->send(head, actors::trainer_started{setup.job_id, setup.attempt});
        self->send(head, actors::attempt_outcome{setup.job_id, setup.attempt, true, {}});
      },
  };
}

// A node as the head sees one: node_hello (again after every welcome), trainers on request.
caf::behavior sim_node(caf::event_based_actor* self, actors::node_info info, caf::actor head,
                       std::shared_ptr<sim_shared> shared) {
  self->set_default_handler(caf::drop);
  self->send(head, actors::node_hello{info});
  return {
      [=](const actors::start_trainer& req) {
        const auto now = steady::now();
        ++shared->start_trainers;
        {
          std::lock_guard<std::mutex> lock(shared->mutex);
          shared->placed.emplace(req.setup.job_id, now);
        }
        self->spawn(sim_trainer, req.setup, head, shared);
      },
      [=](actors::reintroduce) { self->send(head, actors::node_hello{info}); },
      [=](actors::node_ping) { return true; },
  };
}

// CPU seconds (user + system) of process `pid` from /proc/<pid>/stat; -1 when unreadable.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  std::vector<std::string> fields;
  while (rest >> field) fields.push_back(field);
  // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
  if (fields.size() < 13) return -1;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) / tick;
}

struct store_usage {
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
};
// Files and bytes under the store directory (what the head wrote there).
store_usage usage_of(const fs::path& dir) {
  store_usage u;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fe;
    if (it->is_regular_file(fe)) {
      ++u.files;
      u.bytes += it->file_size(fe);
    }
  }
  return u;
}

struct percentiles {
  std::size_t count = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0;  // milliseconds
};
percentiles percentiles_of(std::vector<double> ms) {
  percentiles p;
  p.count = ms.size();
  if (ms.empty()) return p;
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    auto i = static_cast<std::size_t>(q * static_cast<double>(ms.size() - 1) + 0.5);
    return ms[std::min(i, ms.size() - 1)];
  };
  p.p50 = at(0.5);
  p.p90 = at(0.9);
  p.p99 = at(0.99);
  p.max = ms.back();
  return p;
}
std::string json_of(const percentiles& p) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << "{\"count\": " << p.count << ", \"p50_ms\": " << p.p50
    << ", \"p90_ms\": " << p.p90 << ", \"p99_ms\": " << p.p99 << ", \"max_ms\": " << p.max << "}";
  return o.str();
}
std::string text_of(const percentiles& p) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << p.count << " samples, p50 " << p.p50 << " ms, p90 "
    << p.p90 << " ms, p99 " << p.p99 << " ms, max " << p.max << " ms";
  return o.str();
}

double ms_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// How many of `nodes` are this simulator's (named PREFIX<i>).
std::size_t own_nodes(const std::vector<actors::node_info>& nodes, const std::string& prefix) {
  return static_cast<std::size_t>(std::count_if(nodes.begin(), nodes.end(), [&](const auto& n) {
    return n.name.compare(0, prefix.size(), prefix) == 0;
  }));
}

std::string job_spec(int workers, const std::string& custom) {
  return R"({"name": "sim", "workload": "linear_regression", "scaling": {"num_workers": )" +
         std::to_string(workers) + R"(, "resources_per_worker": {"CPU": 1)" +
         (custom.empty() ? "" : ", \"" + custom + "\": 1") + R"(}, "placement_strategy": "PACK"},
    "train": {"micro_batch_size": 16, "grad_accum": 1, "max_steps": 3, "lr": 0.1, "seed": 7},
    "run": {"failure": {"max_failures": 0}}})";
}

// The head the simulator started: a child process on a fresh store in a temp directory.
struct started_head {
  fs::path dir;
  std::unique_ptr<core::proc::child_process> process;
  std::mutex mutex;
  std::condition_variable changed;
  std::string serving_line;
  bool ended = false;
  std::vector<std::string> lines;
};

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  po::options_description desc("usage: cohort-sim [options]");
  desc.add_options()
      ("help,h", "show this help")
      ("nodes", po::value<int>()->default_value(100), "simulated nodes")
      ("slots-per-node", po::value<int>()->default_value(8), "worker slots (CPU) each node offers")
      ("heartbeat-hz", po::value<double>()->default_value(1.0), "heartbeats per second per node")
      ("jobs-per-s", po::value<double>()->default_value(0.5), "jobs submitted per second (0: none)")
      ("jobs", po::value<int>()->default_value(0),
       "submit exactly this many jobs, even past the window (0: as many as the window allows)")
      ("job-workers", po::value<int>()->default_value(512), "workers of each job")
      ("queries-per-s", po::value<double>()->default_value(2.0),
       "status and list requests per second (alternating) during the window")
      ("seconds", po::value<double>()->default_value(30.0), "length of the measured window")
      ("address", po::value<std::string>(), "a running head (else one is started on a temp store)")
      ("credentials", po::value<std::string>(), "its credentials file (with --address)")
      ("store", po::value<std::string>(), "its store directory, for the write rate (with --address)")
      ("head-pid", po::value<int>(), "its pid, for its CPU (with --address)")
      ("head-program", po::value<std::string>(), "cluster-head to start (default: next to this program)")
      ("connect-timeout", po::value<double>()->default_value(120.0), "seconds for every node to join")
      ("name-prefix", po::value<std::string>()->default_value("sim"),
       "node names are PREFIX0, PREFIX1, ... (several simulators on one head need different ones)")
      ("custom-resource", po::value<std::string>(),
       "nodes offer NAME = slots and every worker asks NAME = 1: this simulator's jobs run on its "
       "own nodes when several simulators share a head (its placement latencies are then all seen)")
      ("json", "print the report as JSON");
  po::variables_map vm;
  if (auto done = cohort::tools::read_command_line("cohort-sim", argc, argv, desc, vm)) return *done;
  const int nodes = vm["nodes"].as<int>();
  const int slots = vm["slots-per-node"].as<int>();
  const double hz = vm["heartbeat-hz"].as<double>();
  const double jobs_per_s = vm["jobs-per-s"].as<double>();
  const int max_jobs = vm["jobs"].as<int>();
  const int job_workers = vm["job-workers"].as<int>();
  const double queries_per_s = vm["queries-per-s"].as<double>();
  const double seconds = vm["seconds"].as<double>();
  const bool as_json = vm.count("json") != 0;
  const auto prefix = vm["name-prefix"].as<std::string>();
  const auto custom = vm.count("custom-resource") ? vm["custom-resource"].as<std::string>() : "";
  if (nodes < 1 || slots < 1 || !(hz > 0) || jobs_per_s < 0 || job_workers < 1 || !(seconds > 0)) {
    std::cerr << "cohort-sim: --nodes, --slots-per-node, --heartbeat-hz, --job-workers and --seconds "
                 "must be positive\n";
    return 2;
  }
  if (job_workers > nodes * slots) {
    std::cerr << "cohort-sim: a job of " << job_workers << " workers does not fit " << nodes << " x "
              << slots << " slots\n";
    return 2;
  }
  // Each node's link holds a ZeroMQ context of its own (a few descriptors each).
  // About ten descriptors a node: raise the limit (the hard one too, where allowed).
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    const rlim_t wanted = static_cast<rlim_t>(nodes) * 16 + 1024;
    rlimit more{std::max(files.rlim_cur, wanted), std::max(files.rlim_max, wanted)};
    if (::setrlimit(RLIMIT_NOFILE, &more) != 0) {
      files.rlim_cur = files.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &files);
    }
  }
  auto log = [&](const std::string& line) {
    if (!as_json) std::cout << "cohort-sim: " << line << std::endl;
    else std::cerr << "cohort-sim: " << line << std::endl;
  };

  try {
    std::string address, credentials;
    fs::path store;
    pid_t head_pid = -1;
    auto head = std::make_shared<started_head>();
    if (vm.count("address")) {
      if (!vm.count("credentials")) {
        std::cerr << "cohort-sim: --address needs --credentials\n";
        return 2;
      }
      address = vm["address"].as<std::string>();
      credentials = vm["credentials"].as<std::string>();
      if (vm.count("store")) store = vm["store"].as<std::string>();
      if (vm.count("head-pid")) head_pid = vm["head-pid"].as<int>();
    } else {
      const auto program = vm.count("head-program")
                               ? fs::path(vm["head-program"].as<std::string>())
                               : fs::read_symlink("/proc/self/exe").parent_path() / "cluster-head";
      char tmpl[] = "/tmp/cohort-sim-XXXXXX";
      if (!::mkdtemp(tmpl)) throw std::runtime_error("cannot make a temp directory");
      head->dir = tmpl;
      store = head->dir / "store";
      head->process = std::make_unique<core::proc::child_process>(
          std::vector<std::string>{program.string(), "--store", store.string(), "--port", "0"},
          std::map<std::string, std::string>{},
          [head](const std::string& line) {
            std::lock_guard<std::mutex> lock(head->mutex);
            if (head->lines.size() < 200) head->lines.push_back(line);
            if (head->serving_line.empty() && line.find("serving on") != std::string::npos) {
              head->serving_line = line;
              head->changed.notify_all();
            }
          },
          [head](const core::proc::exit_status&) {
            std::lock_guard<std::mutex> lock(head->mutex);
            head->ended = true;
            head->changed.notify_all();
          });
      head_pid = head->process->pid();
      std::unique_lock<std::mutex> lock(head->mutex);
      head->changed.wait_for(lock, std::chrono::seconds(60),
                             [&] { return !head->serving_line.empty() || head->ended; });
      std::smatch m;
      static const std::regex served("serving on ([^ ]*:[0-9]+) ");
      if (!std::regex_search(head->serving_line, m, served)) {
        std::cerr << "cohort-sim: the head did not start:\n";
        for (const auto& l : head->lines) std::cerr << "  " << l << "\n";
        return 1;
      }
      address = m[1];
      credentials = net::credentials_file_in(store).string();
    }
    log("head at " + address + (head_pid > 0 ? " (pid " + std::to_string(head_pid) + ")" : ""));

    // The simulated nodes: the real node gateway each, with a sim_node behind it.
    caf::actor_system_config cfg;
    actors::configure_scheduler(cfg);  // the simulator's own CPU stays out of the head's way
    caf::actor_system sys{cfg};
    auto shared = std::make_shared<sim_shared>();
    auto creds = net::load_credentials(credentials);
    auto options = net::client_options::from(creds, address);
    actors::liveness_options liveness;
    liveness.heartbeat_interval = std::chrono::milliseconds(static_cast<long>(1000.0 / hz));
    actors::head_search_options search;
    search.addresses = {address};
    std::vector<actors::node_process> sim_nodes;
    sim_nodes.reserve(static_cast<std::size_t>(nodes));
    // Every way out ends the nodes first: the actor system waits for its actors when it ends.
    struct end_nodes {
      std::vector<actors::node_process>& nodes;
      ~end_nodes() {
        for (auto& n : nodes) caf::anon_send_exit(n.gateway, caf::exit_reason::user_shutdown);
        for (auto& n : nodes) caf::anon_send_exit(n.node, caf::exit_reason::user_shutdown);
      }
    } ending{sim_nodes};
    const auto joining = steady::now();
    for (int i = 0; i < nodes; ++i) {
      actors::node_info info;
      info.name = prefix + std::to_string(i);
      info.resources["CPU"] = slots;
      info.resources["memory"] = 64e9;
      if (!custom.empty()) info.resources[custom] = slots;
      sim_nodes.push_back(actors::spawn_node_gateway(
          sys, info.name, options, liveness, search,
          [&](caf::actor head_proxy) { return sys.spawn(sim_node, info, head_proxy, shared); }));
    }
    const auto join_deadline =
        joining + std::chrono::milliseconds(static_cast<long>(vm["connect-timeout"].as<double>() * 1000));
    for (auto& n : sim_nodes) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(join_deadline - steady::now());
      if (!n.join->wait_for_welcome(std::max(left, std::chrono::milliseconds(1)))) {
        std::cerr << "cohort-sim: not every node joined within the connect timeout\n";
        return 1;
      }
    }
    // Welcomed is not registered: wait until the head lists every node (node_hello handled).
    tools::cluster_client querier(address, credentials);
    std::size_t registered = 0;
    while (steady::now() < join_deadline) {
      registered = own_nodes(querier.ask(actors::job_list_query{}).nodes, prefix);
      if (registered >= static_cast<std::size_t>(nodes)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (registered < static_cast<std::size_t>(nodes)) {
      std::cerr << "cohort-sim: the head lists " << registered << " of " << nodes << " nodes\n";
      return 1;
    }
    const double join_s = std::chrono::duration<double>(steady::now() - joining).count();
    log(std::to_string(nodes) + " nodes registered in " + std::to_string(join_s) + " s");

    // The measured window.
    const auto store_before = store.empty() ? store_usage{} : usage_of(store);
    const double cpu_before = head_pid > 0 ? cpu_seconds(head_pid) : -1;
    const double own_cpu_before = cpu_seconds(::getpid());
    const auto window_start = steady::now();
    const auto window_end = window_start + std::chrono::milliseconds(static_cast<long>(seconds * 1000));
    std::vector<std::string> job_ids;
    std::vector<std::string> submit_errors;
    std::thread submitter([&] {
      if (!(jobs_per_s > 0)) return;
      tools::cluster_client client(address, credentials);
      const auto spec = job_spec(job_workers, custom);
      const auto period = std::chrono::duration<double>(1.0 / jobs_per_s);
      auto next = steady::now();
      // --jobs N: exactly N submits, however long they take; else as many as the window allows.
      int tried = 0;
      while (max_jobs > 0 ? tried < max_jobs : steady::now() < window_end) {
        ++tried;
        std::this_thread::sleep_until(next);
        next += std::chrono::duration_cast<steady::duration>(period);
        const auto sent = steady::now();
        try {
          auto accepted = client.ask(actors::submit_job{spec});
          std::lock_guard<std::mutex> lock(shared->mutex);
          shared->submitted[accepted.job_id] = sent;
          job_ids.push_back(accepted.job_id);
        } catch (const std::exception& e) {
          submit_errors.push_back(e.what());
        }
      }
    });
    std::vector<double> status_ms, list_ms;
    std::size_t listed_jobs = 0;
    std::thread query_thread([&] {
      if (!(queries_per_s > 0)) return;
      const auto period = std::chrono::duration<double>(1.0 / queries_per_s);
      auto next = steady::now();
      bool list = false;
      while (steady::now() < window_end) {
        std::this_thread::sleep_until(next);
        next += std::chrono::duration_cast<steady::duration>(period);
        std::string some_job;
        {
          std::lock_guard<std::mutex> lock(shared->mutex);
          if (!shared->submitted.empty()) some_job = shared->submitted.rbegin()->first;
        }
        list = !list || some_job.empty();
        const auto sent = steady::now();
        try {
          if (list) {
            listed_jobs = querier.ask(actors::job_list_query{}).jobs.size();
            list_ms.push_back(ms_between(sent, steady::now()));
          } else {
            querier.ask(actors::job_query{some_job});
            status_ms.push_back(ms_between(sent, steady::now()));
          }
        } catch (const std::exception& e) {
          std::cerr << "cohort-sim: query failed: " << e.what() << std::endl;
        }
      }
    });
    submitter.join();
    query_thread.join();
    std::this_thread::sleep_until(window_end);  // the window lasts --seconds at least
    const auto window_stop = steady::now();
    const double window_s = std::chrono::duration<double>(window_stop - window_start).count();
    const double cpu_after = head_pid > 0 ? cpu_seconds(head_pid) : -1;
    const double own_cpu_after = cpu_seconds(::getpid());
    const auto store_after = store.empty() ? store_usage{} : usage_of(store);

    // Every submitted job to its end (outside the window).
    std::map<std::string, int> states;
    int succeeded = 0;
    const auto settle_deadline = steady::now() + std::chrono::seconds(60);
    for (const auto& id : job_ids) {
      for (;;) {
        auto record = querier.ask(actors::job_query{id});
        if (actors::is_terminal(record.state) || steady::now() > settle_deadline) {
          ++states[actors::to_string(record.state)];
          if (record.state == actors::job_state::succeeded) ++succeeded;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    const auto final_list = querier.ask(actors::job_list_query{});
    std::vector<double> placement_ms;
    {
      std::lock_guard<std::mutex> lock(shared->mutex);
      for (const auto& [id, sent] : shared->submitted)
        if (auto p = shared->placed.find(id); p != shared->placed.end())
          placement_ms.push_back(ms_between(sent, p->second));
    }
    const auto placement = percentiles_of(placement_ms);
    const auto status = percentiles_of(status_ms);
    const auto listing = percentiles_of(list_ms);
    const double head_cpu = cpu_before >= 0 && cpu_after >= 0 ? (cpu_after - cpu_before) / window_s : -1;
    const double sim_cpu = (own_cpu_after - own_cpu_before) / window_s;
    const double heartbeats_per_s = nodes * hz;
    const double write_files_per_s =
        static_cast<double>(store_after.files) - static_cast<double>(store_before.files);
    const double write_bytes = static_cast<double>(store_after.bytes) - static_cast<double>(store_before.bytes);

    if (as_json) {
      std::ostringstream o;
      o << std::fixed << std::setprecision(4);
      o << "{\"nodes\": " << nodes << ", \"slots_per_node\": " << slots << ", \"heartbeat_hz\": " << hz
        << ", \"job_workers\": " << job_workers << ", \"jobs_per_s\": " << jobs_per_s
        << ", \"window_s\": " << window_s << ", \"join_s\": " << join_s
        << ", \"head_cpu_cores\": " << head_cpu << ", \"sim_cpu_cores\": " << sim_cpu
        << ", \"heartbeats_per_s\": " << heartbeats_per_s
        << ", \"nodes_registered_at_end\": " << own_nodes(final_list.nodes, prefix)
        << ", \"jobs_submitted\": " << job_ids.size() << ", \"submit_errors\": " << submit_errors.size()
        << ", \"jobs_succeeded\": " << succeeded
        << ", \"start_trainers_seen\": " << shared->start_trainers.load()
        << ", \"outcomes_acked\": " << shared->outcomes_acked.load()
        << ", \"placement\": " << json_of(placement) << ", \"status\": " << json_of(status)
        << ", \"list\": " << json_of(listing)
        << ", \"store_new_files\": " << static_cast<long long>(write_files_per_s)
        << ", \"store_bytes_per_s\": " << write_bytes / window_s << ", \"job_states\": {";
      bool first = true;
      for (const auto& [s, n] : states) {
        o << (first ? "" : ", ") << "\"" << s << "\": " << n;
        first = false;
      }
      o << "}}";
      std::cout << o.str() << std::endl;
    } else {
      std::ostringstream o;
      o << std::fixed << std::setprecision(3);
      o << "window " << window_s << " s, " << nodes << " nodes x " << slots << " slots, "
        << hz << " Hz heartbeats (" << heartbeats_per_s << "/s offered; "
        << own_nodes(final_list.nodes, prefix) << " nodes registered at the end)\n"
        << "  head CPU: " << head_cpu * 100 << "% of a core; simulator CPU: " << sim_cpu * 100
        << "% of a core\n"
        << "  jobs: " << job_ids.size() << " submitted (" << submit_errors.size() << " refused), "
        << succeeded << " succeeded, " << shared->start_trainers.load() << " start_trainer seen\n"
        << "  placement (submit -> start_trainer at the node): " << text_of(placement) << "\n"
        << "  status: " << text_of(status) << "\n"
        << "  list (" << listed_jobs << " jobs): " << text_of(listing) << "\n"
        << "  store: " << static_cast<long long>(write_files_per_s) << " new files, "
        << write_bytes / window_s << " bytes/s net growth";
      std::cout << o.str() << std::endl;
      for (const auto& e : submit_errors) std::cout << "  submit refused: " << e << std::endl;
    }
    if (head->process) {
      head->process->signal(SIGTERM);
      std::unique_lock<std::mutex> lock(head->mutex);
      head->changed.wait_for(lock, std::chrono::seconds(10), [&] { return head->ended; });
      lock.unlock();
      head->process.reset();
      std::error_code ec;
      fs::remove_all(head->dir, ec);
    }
    const bool all_ok = succeeded == static_cast<int>(job_ids.size()) && submit_errors.empty();
    return all_ok ? 0 : 3;
  } catch (const std::exception& e) {
    std::cerr << "cohort-sim: " << e.what() << "\n";
    return 1;
  }
}

// store_bench: the head's store write rate on each backend, side by side. One writer (as the head
// actor is) holds the lease and, for --writes rounds, writes a job's state, appends a history line
// and appends one output line: the writes of a job's state change and its output. Prints write
// calls per second and the mean latency of each kind, for the directory (--dir) and, when given,
// an etcd cluster (--etcd etcd://HOST:PORT[,...]; a fresh prefix per run, left in etcd). It
// renews the lease every 10 s (ttl 30 s), outside the timed writes.
#include <boost/program_options.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/store/cluster_store.hpp"
#include "tools/command_line.hpp"

namespace po = boost::program_options;
namespace store = cohort::core::store;
using clock_type = std::chrono::steady_clock;

namespace {

void run(const std::string& name, const std::string& location, int writes) {
  auto db = store::open_cluster_store(location);
  auto lease = db->lease().acquire("bench:" + std::to_string(::getpid()), "bench:1",
                                   std::chrono::seconds(30));
  if (!lease) throw std::runtime_error(location + ": another head holds the lease");
  const auto epoch = lease->epoch;
  const auto id = db->create_job(epoch, R"({"name": "bench", "scaling": {"num_workers": 2}})");
  double state_s = 0, event_s = 0, log_s = 0;
  const auto t0 = clock_type::now();
  auto renewed = clock_type::now();
  for (int i = 0; i < writes; ++i) {
    if (clock_type::now() - renewed > std::chrono::seconds(10)) {  // as the head: every ttl/3
      if (!db->lease().renew(epoch, std::chrono::seconds(30)))
        throw std::runtime_error(location + ": lost the lease");
      renewed = clock_type::now();
    }
    auto t = clock_type::now();
    db->write_state(epoch, id, {{"status", "RUNNING"}, {"attempts", 1}, {"step", i}});
    auto t1 = clock_type::now();
    db->append_event(epoch, id, {{"state", "RUNNING"}, {"reason", "round " + std::to_string(i)}});
    auto t2 = clock_type::now();
    db->append_logs(epoch, id, {{{"rank", 0}, {"node", "n1"}, {"line", "step " + std::to_string(i) + " loss 2.345"}}});
    auto t3 = clock_type::now();
    state_s += std::chrono::duration<double>(t1 - t).count();
    event_s += std::chrono::duration<double>(t2 - t1).count();
    log_s += std::chrono::duration<double>(t3 - t2).count();
  }
  (void)t0;
  const double total = state_s + event_s + log_s;
  std::printf("%-9s %6d rounds  %8.0f writes/s  state %7.3f ms  event %7.3f ms  log %7.3f ms\n",
              name.c_str(), writes, 3.0 * writes / total, 1e3 * state_s / writes,
              1e3 * event_s / writes, 1e3 * log_s / writes);
  db->lease().release(epoch);
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc("usage: store_bench --dir DIR [--etcd etcd://HOST:PORT[,...]] [--writes N]");
  desc.add_options()("help,h", "show this help")
      ("dir", po::value<std::string>(), "a directory for the directory store (emptied first)")
      ("etcd", po::value<std::string>(), "an etcd cluster: etcd://HOST:PORT[,HOST:PORT...]")
      ("writes", po::value<int>()->default_value(500), "rounds of (state, event, log line)");
  po::variables_map vm;
  if (auto done = cohort::tools::read_command_line("store_bench", argc, argv, desc, vm)) return *done;
  if (!vm.count("dir")) {
    std::cerr << "store_bench: --dir is required\n" << desc;
    return 2;
  }
  const int writes = vm["writes"].as<int>();
  if (writes < 1) {
    std::cerr << "store_bench: --writes must be at least 1\n";
    return 2;
  }
  try {
    std::filesystem::remove_all(vm["dir"].as<std::string>());
    run("directory", vm["dir"].as<std::string>(), writes);
    if (vm.count("etcd")) {
      auto location = vm["etcd"].as<std::string>();
      if (location.find('/', 7) == std::string::npos)
        location += "/store-bench-" + std::to_string(::getpid());
      run("etcd", location, writes);
    }
  } catch (const std::exception& e) {
    std::cerr << "store_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

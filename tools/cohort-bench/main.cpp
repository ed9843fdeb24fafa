// cohort-bench: runs a job spec on 1, 2, 4, ... nodes of a node list against a running cluster and
// writes one CSV row per run (samples/s, tokens/s, MFU, peak memory, pass/fail against a threshold).
//   cohort-bench --nodes HOSTFILE --spec JOB.json --csv OUT.csv [--counts 1,2,4] [--timeout-s S]
//                [--min-samples-per-s X] [--warmup-steps N] [--address ...] [--credentials ...]
// Each run is a job of its own: the spec restricted to the first N nodes of the list
// (scaling.nodes), with num_workers the sum of their slots. The bench follows it to its end or
// stops it at the timeout, then reads rank 0's metrics.jsonl and every rank's memory CSV from the
// run directory (so it runs where run.storage_path is visible). A run that fails or times out is
// a row, not an error. Exit codes: 0 every run has its row, 1 cluster error, 2 usage or bad input.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <iostream>
#include <string>
#include <variant>
#include <vector>

#include <boost/program_options.hpp>

#include "config/hostfile.hpp"
#include "core/train/job_preflight.hpp"
#include "tools/bench.hpp"
#include "tools/cluster_target.hpp"
#include "tools/submit_options.hpp"

using namespace cohort;
namespace po = boost::program_options;

namespace {

const char* const usage =
    "usage: cohort-bench --nodes HOSTFILE --spec JOB.json --csv OUT.csv [options]\n"
    "  Runs JOB.json on the first 1, 2, 4, ... nodes of HOSTFILE (one node a line: NAME [slots=N],\n"
    "  N workers on it, default 1), one job per node count, each stopped at --timeout-s, and appends\n"
    "  a row per run to OUT.csv: nodes, workers, job id, run name, status (ok, failed, timeout), medians over\n"
    "  the steps after the warmup of samples/s, tokens/s and MFU, peak host and GPU memory, and\n"
    "  pass/fail against --min-samples-per-s. Reads the run directories: run it where the spec's\n"
    "  run.storage_path is visible.\n";

struct bench_options {
  tools::cluster_target cluster;
  std::string nodes, spec, csv, counts;
  double timeout_s = 1800, min_samples_per_s = 0, memory_every_s = 5;
  std::int64_t warmup_steps = 2;
};

// The options, or the exit code when there is nothing to run (--help, a usage error).
std::variant<bench_options, int> parse(int argc, char** argv) {
  po::options_description visible("options");
  visible.add_options()
      ("help,h", "show this help")
      ("nodes", po::value<std::string>(), "HOSTFILE: the nodes, in the order they are taken (required)")
      ("spec", po::value<std::string>(), "JOB.json: the job to run on each node count (required)")
      ("csv", po::value<std::string>(), "OUT.csv: where rows are appended (required; created with a header)")
      ("counts", po::value<std::string>(), "node counts, e.g. 1,2,4 (default 1, 2, 4, ... and all nodes)")
      ("timeout-s", po::value<double>()->default_value(1800), "seconds a run may take; then it is stopped")
      ("min-samples-per-s", po::value<double>()->default_value(0), "a row passes when ok and at least this fast")
      ("warmup-steps", po::value<std::int64_t>()->default_value(2), "logged steps left out of the medians")
      ("memory-every-s", po::value<double>()->default_value(5),
       "run.memory_status_every_s for a spec that leaves it off (the memory peaks come from it)");
  tools::add_cluster_target_options(visible);
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, visible), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "cohort-bench: " << e.what() << "\n" << usage;
    return tools::exit_usage;
  }
  if (vm.count("help")) {
    std::cout << usage << "\n" << visible;
    return tools::exit_ok;
  }
  bench_options o;
  for (const char* required : {"nodes", "spec", "csv"}) {
    if (!vm.count(required)) {
      std::cerr << "cohort-bench: --" << required << " is missing\n" << usage;
      return tools::exit_usage;
    }
  }
  o.nodes = vm["nodes"].as<std::string>();
  o.spec = vm["spec"].as<std::string>();
  o.csv = vm["csv"].as<std::string>();
  o.counts = vm.count("counts") ? vm["counts"].as<std::string>() : "";
  o.timeout_s = vm["timeout-s"].as<double>();
  o.min_samples_per_s = vm["min-samples-per-s"].as<double>();
  o.warmup_steps = vm["warmup-steps"].as<std::int64_t>();
  o.memory_every_s = vm["memory-every-s"].as<double>();
  struct range_check {
    const char* option;
    double value;
    bool ok;
    const char* allowed;
  };
  const range_check checks[] = {
      {"--timeout-s", o.timeout_s, o.timeout_s > 0 && o.timeout_s <= 1e8, "seconds > 0 (at most 1e8)"},
      {"--min-samples-per-s", o.min_samples_per_s, o.min_samples_per_s >= 0 && std::isfinite(o.min_samples_per_s),
       "a number >= 0"},
      {"--warmup-steps", static_cast<double>(o.warmup_steps), o.warmup_steps >= 0, "an integer >= 0"},
      {"--memory-every-s", o.memory_every_s, o.memory_every_s > 0 && o.memory_every_s <= 86400,
       "seconds > 0 (at most 86400)"}};
  for (const auto& c : checks) {
    if (c.ok) continue;
    std::cerr << "cohort-bench: " << c.option << " got " << c.value << "; allowed: " << c.allowed << "\n";
    return tools::exit_usage;
  }
  try {
    o.cluster = tools::read_cluster_target(vm);
  } catch (const std::invalid_argument& e) {
    std::cerr << "cohort-bench: " << e.what() << "\n";
    return tools::exit_usage;
  }
  return o;
}

// The UTC time now as 20261127T081500: the runs' names tell benches apart.
std::string utc_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%S", &utc);
  return text;
}

// Submits one run and follows it to its end, or stops it at the deadline. Fills status, job id
// and reason of `row`.
void run_job(tools::cluster_client& client, const config::job_spec& spec, double timeout_s, tools::bench_row& row) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000));
  row.job_id = client.ask(actors::submit_job{config::to_json_text(spec)}).job_id;
  const auto ignore = [](const actors::job_event&) {};
  auto last = tools::follow_job_events(client, row.job_id, client.ask(actors::follow_job{row.job_id}), ignore, deadline);
  if (!actors::is_terminal(last.state)) {
    row.status = tools::run_status::timeout;
    row.reason = "did not end within " + tools::bench_csv_number(timeout_s) + " s (at step " +
                 std::to_string(last.step) + "/" + std::to_string(last.total_steps) + "); stopped";
    // The next run needs the nodes: wait (bounded) until the stop released them.
    last = tools::follow_job_events(client, row.job_id, client.ask(actors::stop_job{row.job_id}), ignore,
                                    clock::now() + std::chrono::seconds(120));
    if (!actors::is_terminal(last.state)) row.reason += ", but it was still " + std::string(to_string(last.state)) + " 120 s later";
    return;
  }
  row.status = last.state == actors::job_state::succeeded ? tools::run_status::ok : tools::run_status::failed;
  if (row.status == tools::run_status::failed) row.reason = std::string(to_string(last.state)) + ": " + last.reason;
}

// Every node of the list must be in the cluster: a run on a node that is not would wait PENDING
// until its timeout. Throws spec_error naming the file and line of the first one missing.
void check_listed_nodes_joined(tools::cluster_client& client, const std::vector<config::host_entry>& hosts,
                               const std::string& file) {
  const auto joined = client.ask(actors::job_list_query{}).nodes;
  for (const auto& host : hosts) {
    if (std::any_of(joined.begin(), joined.end(), [&](const actors::node_info& n) { return n.name == host.name; }))
      continue;
    std::string names;
    for (const auto& n : joined) names += (names.empty() ? "" : ", ") + n.name;
    throw config::spec_error(file + ":" + std::to_string(host.line),
                             "node " + host.name + " is not in the cluster at " + client.address() +
                                 " (its nodes: " + (names.empty() ? "none" : names) +
                                 "); list the names cluster-worker --name gave");
  }
}

int bench(const bench_options& o) {
  const auto hosts = config::load_hostfile(o.nodes);
  const auto counts = o.counts.empty() ? tools::default_node_counts(hosts.size())
                                       : tools::parse_node_counts(o.counts, hosts.size());
  const auto base = core::train::load_runnable_spec(o.spec);
  auto csv = tools::open_bench_csv(o.csv);
  auto client = tools::connect(o.cluster);
  check_listed_nodes_joined(*client, hosts, o.nodes);
  const std::string stamp = utc_stamp();
  for (const int count : counts) {
    const auto name = tools::bench_run_name(base.name, count, stamp, base.run.storage_path);
    const auto spec = tools::bench_spec(base, hosts, count, name, o.memory_every_s);
    tools::bench_row row;
    row.nodes = count;
    row.run_name = name;
    row.workers = spec.scaling.num_workers;
    row.min_samples_per_s = o.min_samples_per_s;
    std::cout << "cohort-bench: " << count << (count == 1 ? " node, " : " nodes, ") << row.workers
              << (row.workers == 1 ? " worker" : " workers") << ": job " << name << std::endl;
    try {
      run_job(*client, spec, o.timeout_s, row);
    } catch (const tools::client_error& e) {  // refused by the head, or the head went away
      row.status = tools::run_status::failed;
      row.reason = e.what();
    }
    const std::string run_dir = spec.run.storage_path + "/" + spec.name;
    try {
      row.throughput = tools::read_run_throughput(run_dir, config::global_batch(spec), o.warmup_steps);
      row.memory = tools::read_run_memory_peaks(run_dir);
    } catch (const tools::bench_error& e) {
      row.reason += (row.reason.empty() ? "" : "; ") + std::string(e.what());
    }
    if (row.status == tools::run_status::ok && !row.throughput.samples_per_s)
      row.reason = "no step after the first " + std::to_string(o.warmup_steps) + " logged a step time in " + run_dir +
                   "/metrics.jsonl (is run.storage_path visible here? are there more steps than --warmup-steps?)";
    csv << tools::bench_csv_line(row) << '\n' << std::flush;
    std::cout << "cohort-bench: " << count << (count == 1 ? " node: " : " nodes: ") << to_string(row.status);
    if (row.throughput.samples_per_s) std::cout << ", " << tools::bench_csv_number(*row.throughput.samples_per_s) << " samples/s";
    std::cout << ", " << (row.passed() ? "pass" : "fail") << (row.reason.empty() ? "" : " (" + row.reason + ")")
              << std::endl;
  }
  std::cout << "cohort-bench: " << counts.size() << (counts.size() == 1 ? " row" : " rows") << " appended to "
            << o.csv << std::endl;
  return tools::exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that went away must show up as EPIPE on its connection, not end this process.
  ::signal(SIGPIPE, SIG_IGN);
  auto parsed = parse(argc, argv);
  if (auto* code = std::get_if<int>(&parsed)) return *code;
  const auto& o = std::get<bench_options>(parsed);
  return tools::exit_code_of([&] { return bench(o); }, "cohort-bench");
}

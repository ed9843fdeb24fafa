// cohort-bench: runs a job spec on 1, 2, 4, ... nodes of a node list against a running cluster and
// writes one CSV row per run (samples/s, tokens/s, MFU, peak memory, pass/fail against a threshold).
//   cohort-bench --nodes HOSTFILE --spec JOB.json --csv OUT.csv [--counts 1,2,4] [--timeout-s S]
//                [--min-samples-per-s X] [--warmup-steps N] [--address ...] [--credentials ...]
// Each run is a job of its own: the spec restricted to the first N nodes of the list
// (scaling.nodes), with num_workers the sum of their slots. The bench follows it to its end or
// stops it at the timeout, then reads rank 0's metrics.jsonl and every rank's memory CSV from the
// run directory (so it runs where run.storage_path is visible). A run that fails or times out is
// a row, not an error. Exit codes: 0 every run has its row, 1 cluster error, 2 usage or bad input.
// With --group-size B it is a burn-in instead: the node list cut into disjoint groups of B nodes,
// the spec run on every group at once (one job each), one row per group; a group with a broken
// node fails alone, named by the row's node_names and reason.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <iostream>
#include <string>
#include <thread>
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
    "  a row per run to OUT.csv: nodes, workers, job id, run name, status (ok, failed, timeout), medians "
    "over\n"
    "  the steps after the warmup of samples/s, tokens/s and MFU, peak host and GPU memory, and\n"
    "  pass/fail against --min-samples-per-s. Reads the run directories: run it where the spec's\n"
    "  run.storage_path is visible.\n"
    "  With --group-size B (a burn-in), cuts HOSTFILE into disjoint groups of B nodes in its order and\n"
    "  runs JOB.json on every group at the same time, a row per group; the nodes after the last whole\n"
    "  group are named and left out.\n";

struct bench_options {
  tools::cluster_target cluster;
  std::string nodes, spec, csv, counts;
  double timeout_s = 1800, min_samples_per_s = 0, memory_every_s = 5;
  std::int64_t warmup_steps = 2;
  int group_size = 0;  // a burn-in's group size (0: runs on the first N nodes, --counts)
};

// The options, or the exit code when there is nothing to run (--help, a usage error).
std::variant<bench_options, int> parse(int argc, char** argv) {
  po::options_description visible("options");
  visible.add_options()("help,h", "show this help")(
      "nodes", po::value<std::string>(), "HOSTFILE: the nodes, in the order they are taken (required)")(
      "spec", po::value<std::string>(), "JOB.json: the job to run on each node count (required)")(
      "csv", po::value<std::string>(), "OUT.csv: where rows are appended (required; created with a header)")(
      "counts", po::value<std::string>(), "node counts, e.g. 1,2,4 (default 1, 2, 4, ... and all nodes)")(
      "group-size", po::value<int>(),
      "B: a burn-in: disjoint groups of B nodes of HOSTFILE, all run at once, a row each (not with "
      "--counts)")("timeout-s", po::value<double>()->default_value(1800),
                   "seconds a run may take; then it is stopped")(
      "min-samples-per-s", po::value<double>()->default_value(0),
      "a row passes when ok and at least this fast")(
      "warmup-steps", po::value<std::int64_t>()->default_value(2), "logged steps left out of the medians")(
      "memory-every-s", po::value<double>()->default_value(5),
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
  if (vm.count("group-size")) {
    if (vm.count("counts")) {
      std::cerr << "cohort-bench: give --counts (runs on the first N nodes) or --group-size (a burn-in), not "
                   "both\n";
      return tools::exit_usage;
    }
    o.group_size = vm["group-size"].as<int>();
  }
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

// "n1, n2": the names, in their order.
std::string names_text(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& n : names) text += (text.empty() ? "" : ", ") + n;
  return text;
}

std::string node_list_text(const std::vector<config::host_entry>& hosts) {
  std::vector<std::string> names;
  for (const auto& h : hosts) names.push_back(h.name);
  return names_text(names);
}

// Every node of the list must be in the cluster: a run on a node that is not would wait PENDING
// until its timeout. Throws spec_error naming the file and line of the first one missing.
void check_listed_nodes_joined(tools::cluster_client& client, const std::vector<config::host_entry>& hosts,
                               const std::string& file) {
  const auto joined = client.ask(actors::job_list_query{}).nodes;
  for (const auto& host : hosts) {
    if (std::any_of(joined.begin(), joined.end(), [&](const actors::node_info& n) { return n.name == host.name; }))
      continue;
    std::vector<std::string> joined_names;
    for (const auto& n : joined) joined_names.push_back(n.name);
    const auto names = names_text(joined_names);
    throw config::spec_error(file + ":" + std::to_string(host.line),
                             "node " + host.name + " is not in the cluster at " + client.address() +
                                 " (its nodes: " + (names.empty() ? "none" : names) +
                                 "); list the names cluster-worker --name gave");
  }
}

// The row of a run that ended (or was stopped): its throughput and memory from its run directory.
void measure_row(const config::job_spec& spec, std::int64_t warmup_steps, tools::bench_row& row) {
  const std::string run_dir = spec.run.storage_path + "/" + spec.name;
  try {
    row.throughput = tools::read_run_throughput(run_dir, config::global_batch(spec), warmup_steps);
    row.memory = tools::read_run_memory_peaks(run_dir);
  } catch (const tools::bench_error& e) {
    row.reason += (row.reason.empty() ? "" : "; ") + std::string(e.what());
  }
  if (row.status == tools::run_status::ok && !row.throughput.samples_per_s)
    row.reason =
        "no step after the first " + std::to_string(warmup_steps) + " logged a step time in " + run_dir +
        "/metrics.jsonl (is run.storage_path visible here? are there more steps than --warmup-steps?)";
}

// Runs `spec` to its end (or the timeout) through `client` and measures it: its row.
tools::bench_row run_and_measure(tools::cluster_client& client, const config::job_spec& spec,
                                 const bench_options& o, tools::bench_row row) {
  row.run_name = spec.name;
  row.workers = spec.scaling.num_workers;
  row.node_names = spec.scaling.nodes;
  row.min_samples_per_s = o.min_samples_per_s;
  try {
    run_job(client, spec, o.timeout_s, row);
  } catch (const tools::client_error& e) {  // refused by the head, or the head went away
    row.status = tools::run_status::failed;
    row.reason = e.what();
  }
  measure_row(spec, o.warmup_steps, row);
  return row;
}

// "2 nodes: ok, 12.5 samples/s, pass" after `what`.
void say_row(const std::string& what, const tools::bench_row& row) {
  std::cout << "cohort-bench: " << what << ": " << to_string(row.status);
  if (row.throughput.samples_per_s)
    std::cout << ", " << tools::bench_csv_number(*row.throughput.samples_per_s) << " samples/s";
  std::cout << ", " << (row.passed() ? "pass" : "fail") << (row.reason.empty() ? "" : " (" + row.reason + ")")
            << std::endl;
}

// Runs on the first N nodes for each count, one after another: the rows written.
std::size_t bench_counts(const bench_options& o, const std::vector<config::host_entry>& hosts,
                         const std::vector<int>& counts, const config::job_spec& base, std::ofstream& csv,
                         const std::string& stamp) {
  auto client = tools::connect(o.cluster);
  check_listed_nodes_joined(*client, hosts, o.nodes);
  for (const int count : counts) {
    const auto name = tools::bench_run_name(base.name, count, stamp, base.run.storage_path);
    const auto spec = tools::bench_spec(base, hosts, count, name, o.memory_every_s);
    std::cout << "cohort-bench: " << count << (count == 1 ? " node, " : " nodes, ")
              << spec.scaling.num_workers << (spec.scaling.num_workers == 1 ? " worker" : " workers")
              << ": job " << name << std::endl;
    tools::bench_row row;
    row.nodes = count;
    row = run_and_measure(*client, spec, o, row);
    csv << tools::bench_csv_line(row) << '\n' << std::flush;
    say_row(std::to_string(count) + (count == 1 ? " node" : " nodes"), row);
  }
  return counts.size();
}

// A burn-in: every group at once, each job followed on a connection of its own: the rows written.
std::size_t bench_groups(const bench_options& o, const std::vector<config::host_entry>& hosts,
                         const tools::node_groups& cut, const config::job_spec& base, std::ofstream& csv,
                         const std::string& stamp) {
  check_listed_nodes_joined(*tools::connect(o.cluster), hosts, o.nodes);
  if (!cut.left_over.empty())
    std::cout << "cohort-bench: " << cut.left_over.size() << (cut.left_over.size() == 1 ? " node" : " nodes")
              << " left over after " << cut.groups.size() << " groups of " << o.group_size
              << ", run in no group: " << node_list_text(cut.left_over) << std::endl;
  std::vector<config::job_spec> specs;
  for (std::size_t g = 0; g < cut.groups.size(); ++g) {
    const int group = static_cast<int>(g) + 1;
    const auto name =
        tools::bench_group_run_name(base.name, group, o.group_size, stamp, base.run.storage_path);
    specs.push_back(tools::bench_spec(base, cut.groups[g], o.group_size, name, o.memory_every_s));
    std::cout << "cohort-bench: group " << group << " (" << node_list_text(cut.groups[g]) << "), "
              << specs.back().scaling.num_workers
              << (specs.back().scaling.num_workers == 1 ? " worker" : " workers") << ": job " << name
              << std::endl;
  }
  std::vector<tools::bench_row> rows(specs.size());
  std::vector<std::thread> runs;
  for (std::size_t g = 0; g < specs.size(); ++g)
    runs.emplace_back([&, g] {
      tools::bench_row row;
      row.nodes = o.group_size;
      row.group = static_cast<int>(g) + 1;
      try {
        auto client = tools::connect(o.cluster);
        rows[g] = run_and_measure(*client, specs[g], o, row);
      } catch (const std::exception& e) {  // no connection: the group's row says why
        row.node_names = specs[g].scaling.nodes;
        row.run_name = specs[g].name;
        row.reason = e.what();
        rows[g] = row;
      }
    });
  for (auto& t : runs) t.join();
  for (const auto& row : rows) {
    csv << tools::bench_csv_line(row) << '\n' << std::flush;
    say_row("group " + std::to_string(row.group) + " (" + names_text(row.node_names) + ")", row);
  }
  return rows.size();
}

int bench(const bench_options& o) {
  const auto hosts = config::load_hostfile(o.nodes);
  const bool burn_in = o.group_size > 0;
  const auto groups = burn_in ? tools::make_node_groups(hosts, o.group_size) : tools::node_groups{};
  const auto counts = burn_in            ? std::vector<int>{}
                      : o.counts.empty() ? tools::default_node_counts(hosts.size())
                                         : tools::parse_node_counts(o.counts, hosts.size());
  const auto base = core::train::load_runnable_spec(o.spec);
  auto csv = tools::open_bench_csv(o.csv);
  const std::string stamp = utc_stamp();
  const std::size_t written = burn_in ? bench_groups(o, hosts, groups, base, csv, stamp)
                                      : bench_counts(o, hosts, counts, base, csv, stamp);
  std::cout << "cohort-bench: " << written << (written == 1 ? " row" : " rows") << " appended to " << o.csv
            << std::endl;
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

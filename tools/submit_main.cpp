// submit: the user's client. `submit plan JOB.json --nodes NODES.json` shows where a job would
// run; `submit --local run JOB.json` runs it on a cluster embedded in this process (a head and
// one node, or the nodes of --nodes) and follows it to the end.
// Exit codes: 0 ok (job SUCCEEDED), 1 job failed or cluster error, 2 usage or bad input.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>

#include "actors/local_cluster.hpp"
#include "config/job_spec.hpp"
#include "config/nodes_spec.hpp"
#include "core/resources/placement.hpp"
#include "tools/progress_printer.hpp"

namespace po = boost::program_options;
using namespace cohort;

namespace {

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;

const char* usage_text =
    "usage: submit [--local] [--nodes NODES.json] [--num-cpus N] COMMAND ...\n"
    "  submit plan JOB.json --nodes NODES.json   where the job's trainer and ranks would run\n"
    "  submit --local run JOB.json [--follow]     run on an embedded cluster, follow to the end\n";

// The embedded node, when no --nodes is given: this machine's CPUs and memory.
std::vector<config::node_spec> local_machine(double cpus) {
  if (cpus <= 0) cpus = std::max(1u, std::thread::hardware_concurrency());
  double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  return {config::node_spec{"local", {{"CPU", cpus}, {"memory", memory}}}};
}

int plan(const std::string& job_path, const std::vector<config::node_spec>& nodes) {
  auto spec = config::load_job_spec(job_path);
  auto result = core::resources::plan_job(spec, core::resources::inventories_from_specs(nodes));
  if (result.status != core::resources::placement_status::placed) {
    std::cerr << "submit plan: no placement for job " << spec.name << " ("
              << core::resources::to_string(result.status) << "): " << result.reason << "\n";
    return exit_usage;
  }
  std::cout << core::resources::plan_json_text(result.plan) << "\n";
  return exit_ok;
}

int run_local(const std::string& job_path, const std::vector<config::node_spec>& nodes) {
  auto spec = config::load_job_spec(job_path);
  auto check = core::resources::plan_job(spec, core::resources::inventories_from_specs(nodes));
  if (check.status == core::resources::placement_status::infeasible) {
    std::cerr << "submit: job " << spec.name << " can never run on this local cluster: "
              << check.reason << "\n(give the embedded node more with --num-cpus, or "
              << "describe nodes with --nodes)\n";
    return exit_usage;
  }
  std::vector<actors::node_info> infos;
  for (const auto& n : nodes) infos.push_back(actors::node_info{n.name, n.resources});
  actors::local_cluster cluster(infos);
  auto id = cluster.submit(config::to_json_text(spec));
  std::cout << id << std::endl;
  tools::progress_printer printer(std::cout, ::isatty(STDOUT_FILENO) != 0);
  auto last = cluster.follow(id, std::chrono::hours(24 * 365),
                             [&](const actors::job_event& e) { printer.on_event(e); });
  printer.finish(last);
  return last.state == actors::job_state::succeeded ? exit_ok : exit_failed;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description global("options");
  global.add_options()
      ("help,h", "show this help")
      ("local", "run on a cluster embedded in this process")
      ("nodes", po::value<std::string>(), "NODES.json: the nodes to plan for or to embed")
      ("num-cpus", po::value<double>()->default_value(0), "CPUs of the embedded node (0: this machine's)")
      ("follow", "stream progress until the job ends (always on with --local)")
      ("command", po::value<std::string>(), "plan | run")
      ("job", po::value<std::string>(), "JOB.json");
  po::positional_options_description positional;
  positional.add("command", 1).add("job", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(global).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "submit: " << e.what() << "\n" << usage_text;
    return exit_usage;
  }
  if (vm.count("help") || !vm.count("command")) {
    std::cout << usage_text << "\n" << global;
    return vm.count("help") ? exit_ok : exit_usage;
  }
  const auto command = vm["command"].as<std::string>();
  if (!vm.count("job")) {
    std::cerr << "submit " << command << ": JOB.json is missing\n" << usage_text;
    return exit_usage;
  }
  const auto job = vm["job"].as<std::string>();
  try {
    std::vector<config::node_spec> nodes =
        vm.count("nodes") ? config::load_nodes_file(vm["nodes"].as<std::string>())
                          : local_machine(vm["num-cpus"].as<double>());
    if (command == "plan") {
      if (!vm.count("nodes")) {
        std::cerr << "submit plan: --nodes NODES.json is required (no cluster address given)\n";
        return exit_usage;
      }
      return plan(job, nodes);
    }
    if (command == "run") {
      if (!vm.count("local")) {
        std::cerr << "submit run: no cluster given; use --local (a cluster address arrives with "
                     "cluster-head)\n";
        return exit_usage;
      }
      return run_local(job, nodes);
    }
    std::cerr << "submit: unknown command \"" << command << "\"\n" << usage_text;
    return exit_usage;
  } catch (const config::spec_error& e) {
    std::cerr << "submit: " << e.what() << "\n";
    return exit_usage;
  } catch (const std::exception& e) {
    std::cerr << "submit: " << e.what() << "\n";
    return exit_failed;
  }
}

// submit's command line (see submit_options.hpp).
#include "tools/submit_options.hpp"

#include <algorithm>
#include <iostream>
#include <iterator>

#include <boost/program_options.hpp>

#include <stdexcept>

namespace po = boost::program_options;

namespace cohort::tools {

const char* const submit_usage =
    "usage: submit [options] COMMAND [ARG]\n"
    "  plan JOB.json [--nodes NODES.json]  where the job's trainer and ranks would run, and the\n"
    "                                      GPU memory and host RAM each rank needs [--json]\n"
    "  run JOB.json [--follow]             submit a job (prints its id first); --local or no\n"
    "                                      address nor --store: run it on an embedded cluster\n"
    "                                      and follow it\n"
    "  status JOB [--json]                 a job's state, placement, attempts and failures\n"
    "  list [--json]                       every job, and the nodes with their GPUs\n"
    "  logs JOB [-f]                       the workers' output (-f: keep following)\n"
    "  checkpoint JOB                      save a checkpoint of a running job after its next step\n"
    "  release JOB                         let a job held at run.hold_before_step go on\n"
    "  stop JOB                            stop a job\n"
    "  drain NODE                          take a node out of service: its jobs save an emergency\n"
    "                                      checkpoint and move to other nodes; nothing new is\n"
    "                                      placed on it until undrain\n"
    "  undrain NODE                        make a drained node take placements again\n"
    "  metrics-token                       the bearer token of the head's dashboard and metrics endpoint\n"
    "                                      (cluster-head --dashboard-port), from the credentials\n";

std::variant<submit_options, int> parse_submit_options(int argc, char** argv) {
  po::options_description visible("options");
  visible.add_options()("help,h", "show this help");
  add_cluster_target_options(visible);
  visible.add_options()
      ("local", "run on a cluster embedded in the client (a cohort-local process on this machine)")
      ("nodes", po::value<std::string>(), "NODES.json: the nodes to plan for, or to embed with --local")
      ("num-cpus", po::value<double>()->default_value(0), "CPUs of the embedded node (0: this machine's)")
      ("num-gpus", po::value<double>(),
       "GPUs of the embedded node (default: every GPU found; CUDA_VISIBLE_DEVICES honoured)")
      ("follow,f", "stream progress (run) or output (logs) until the job ends")
      ("json", "print JSON (plan, status, list)");
  // The positional COMMAND and ARG: parsed, never listed by --help.
  po::options_description hidden;
  hidden.add_options()("command", po::value<std::string>())("arg", po::value<std::string>());
  po::options_description all;
  all.add(visible).add(hidden);
  po::positional_options_description positional;
  positional.add("command", 1).add("arg", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "submit: " << e.what() << "\n" << submit_usage;
    return exit_usage;
  }
  if (vm.count("help") || !vm.count("command")) {
    std::cout << submit_usage << "\n" << visible;
    return vm.count("help") ? exit_ok : exit_usage;
  }
  submit_options o;
  o.command = vm["command"].as<std::string>();
  o.arg = vm.count("arg") ? vm["arg"].as<std::string>() : "";
  try {
    static_cast<cluster_target&>(o) = read_cluster_target(vm);
  } catch (const std::invalid_argument& e) {
    std::cerr << "submit: " << e.what() << "\n";
    return exit_usage;
  }
  o.nodes = vm.count("nodes") ? vm["nodes"].as<std::string>() : "";
  o.local = vm.count("local") != 0;
  o.follow = vm.count("follow") != 0;
  o.json = vm.count("json") != 0;
  o.num_cpus = vm["num-cpus"].as<double>();
  if (vm.count("num-gpus")) o.num_gpus = vm["num-gpus"].as<double>();
  static const char* const commands[] = {"plan", "run", "status", "list", "logs", "checkpoint",
                                          "release", "stop", "drain", "undrain", "metrics-token"};
  if (std::find(std::begin(commands), std::end(commands), o.command) == std::end(commands)) {
    std::cerr << "submit: unknown command \"" << o.command << "\" (allowed: plan, run, status, list, "
              << "logs, checkpoint, release, stop, drain, undrain, metrics-token)\n" << submit_usage;
    return exit_usage;
  }
  if (o.command != "list" && o.command != "metrics-token" && o.arg.empty()) {
    std::cerr << "submit " << o.command << ": "
              << (o.command == "run" || o.command == "plan"          ? "JOB.json"
                  : o.command == "drain" || o.command == "undrain" ? "NODE (a node name)"
                                                                   : "JOB (a job id)")
              << " is missing\n" << submit_usage;
    return exit_usage;
  }
  return o;
}

bool runs_without_cluster(const submit_options& o) {
  if (o.command == "plan") return !o.nodes.empty();
  return o.command == "run" && (o.local || (o.address.empty() && o.store.empty()));
}

}  // namespace cohort::tools

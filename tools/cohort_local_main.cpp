// cohort-local: what `submit` runs without a cluster, with submit's own arguments (submit execs
// it): `run JOB.json` on a head and a node embedded in this process (--local, or no address nor
// store), each rank in a cohort-worker process of its own (the program beside this one), followed
// to its end, and `plan JOB.json --nodes NODES.json`, the head's placement and memory rules over
// the listed nodes. It links the engine; `submit` does not.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/head_state.hpp"
#include "actors/local_cluster.hpp"
#include "config/job_spec.hpp"
#include "config/nodes_spec.hpp"
#include "core/resources/placement.hpp"
#include "core/train/job_preflight.hpp"
#include "tools/machine.hpp"
#include "tools/plan_output.hpp"
#include "tools/progress_printer.hpp"
#include "tools/submit_options.hpp"

using namespace cohort;
using tools::exit_failed;
using tools::exit_ok;
using tools::exit_usage;
using options = tools::submit_options;

namespace {

// The embedded cluster's nodes: NODES.json's, or this machine with its CPUs, memory and GPUs.
std::vector<actors::node_info> local_nodes(const options& o) {
  std::vector<actors::node_info> infos;
  if (!o.nodes.empty()) {
    for (const auto& n : config::load_nodes_file(o.nodes)) infos.push_back(actors::node_info{n.name, n.resources});
    return infos;
  }
  actors::node_info local{"local",
                          {{"CPU", o.num_cpus > 0 ? o.num_cpus : tools::machine_cpus()},
                           {"memory", tools::machine_memory_bytes()}}};
  tools::add_gpu_offer(local, tools::machine_gpu_offer(o.num_gpus, "--num-gpus"));
  return {local};
}

// The worker program beside this one (cohort-worker), which the embedded nodes start for each
// rank as a cluster-worker does; throws std::runtime_error naming it when it is not there.
std::string worker_program() {
  const auto program =
      std::filesystem::read_symlink("/proc/self/exe").parent_path() / "cohort-worker";
  if (!std::filesystem::exists(program))
    throw std::runtime_error("the worker program " + program.string() +
                             " does not exist (it is built and installed beside submit)");
  return program.string();
}

// `submit run JOB.json` without a cluster: checks the job can ever run on the embedded node(s),
// then runs it on a head and node embedded here, each rank in a cohort-worker process of its own,
// and follows it to its end.
int run_local(const options& o) {
  auto spec = core::train::load_runnable_spec(o.arg);
  if (config::has_holds(spec.run)) {
    const bool one = spec.run.hold_before_step > 0;
    std::cerr << "submit: " << (one ? "run.hold_before_step " : "run.hold_before_steps ")
              << (one ? spec.run.hold_before_step : spec.run.hold_before_steps.front())
              << ": the cluster embedded in this process has no `submit release`, so the job would "
                 "hold forever; run it on a cluster (--address), or remove the hold\n";
    return exit_usage;
  }
  std::vector<actors::node_info> infos;
  try {
    infos = local_nodes(o);
  } catch (const core::resources::resource_error& e) {
    std::cerr << "submit: " << e.what() << "\n";
    return exit_usage;
  }
  std::vector<core::resources::node_inventory> inventories;
  for (const auto& n : infos)
    inventories.emplace_back(n.name, core::resources::resource_set(n.resources));
  actors::head_state judge;  // the head's own rule for GPU counts no node can ever hold
  for (const auto& n : infos) judge.add_node(n);
  if (auto refusal = judge.gpu_refusal(spec); !refusal.empty()) {
    std::cerr << "submit: job " << spec.name << " can never run on this local cluster: "
              << (core::resources::cuda_build() || o.num_gpus ? refusal
                                                              : std::string("scaling.use_gpu: ") +
                                                                    core::resources::no_cuda_text)
              << "\n";
    return exit_usage;
  }
  auto check = core::resources::plan_job(spec, inventories);
  if (check.status == core::resources::placement_status::infeasible) {
    std::cerr << "submit: job " << spec.name << " can never run on this local cluster: "
              << check.reason << "\n(give the embedded node more with --num-cpus, or "
              << "describe nodes with --nodes)\n";
    return exit_usage;
  }
  actors::local_cluster cluster(infos, worker_program());
  auto id = cluster.submit(config::to_json_text(spec));
  std::cout << id << std::endl;
  tools::progress_printer printer(std::cout, ::isatty(STDOUT_FILENO) != 0);
  auto last = cluster.follow(id, std::chrono::hours(24 * 365),
                             [&](const actors::job_event& e) { printer.on_event(e); });
  printer.finish(last);
  return last.state == actors::job_state::succeeded ? exit_ok : exit_failed;
}

// `submit plan JOB --nodes NODES.json`: the head's own placement and memory admission, over the
// listed nodes.
int plan(const options& o) {
  auto spec = config::load_job_spec(o.arg);
  actors::head_state head;
  for (const auto& n : config::load_nodes_file(o.nodes)) {
    actors::node_info info{n.name, n.resources};
    info.gpu_memory_bytes = n.gpu_memory_bytes;
    head.add_node(info);
  }
  const auto result = head.plan(spec);
  if (result.status != core::resources::placement_status::placed) {
    std::cerr << "submit plan: no placement for job " << spec.name << " ("
              << core::resources::to_string(result.status) << "): " << result.reason << "\n";
    return exit_usage;
  }
  const auto memory = actors::plan_rank_memory(spec);
  if (o.json) std::cout << tools::plan_json(result.plan, memory).dump() << "\n";
  else tools::print_plan(std::cout, spec.name, result.plan, memory);
  return exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  auto parsed = tools::parse_submit_options(argc, argv);
  if (auto* code = std::get_if<int>(&parsed)) return *code;
  const auto& o = std::get<options>(parsed);
  if (!tools::runs_without_cluster(o)) {
    std::cerr << "cohort-local: `" << o.command << "` needs a cluster: run it with submit "
              << "(cohort-local runs `run` with --local or no address, and `plan --nodes`)\n";
    return exit_usage;
  }
  return tools::exit_code_of([&] { return o.command == "plan" ? plan(o) : run_local(o); });
}

// submit: the user's client.
//   submit plan JOB.json [--nodes NODES.json]   where the job would run (offline, or live cluster)
//   submit run JOB.json [--follow]              submit to the cluster (--local: embedded cluster)
//   submit status JOB [--json] | list [--json] | logs JOB [-f] | checkpoint JOB | release JOB
//   | stop JOB | drain NODE | undrain NODE
// The cluster is --address / $COHORT_ADDRESS (a list of heads: the one that leads answers; a
// standby's "not the leader; the leader is X" is followed) with --credentials /
// $COHORT_CREDENTIALS; a client that shares the store (--store, or a credentials file inside it)
// also finds the leader from the store's leader record. `run` without any address or store runs on
// a cluster embedded in this process.
// Exit codes: 0 ok (a followed job SUCCEEDED), 1 job failed or cluster error, 2 usage or bad input.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "actors/head_state.hpp"
#include "actors/job_record_json.hpp"
#include "actors/local_cluster.hpp"
#include "config/job_spec.hpp"
#include "config/nodes_spec.hpp"
#include "core/resources/placement.hpp"
#include "core/train/job_preflight.hpp"
#include "core/train/memory_estimate.hpp"
#include "net/bridge_messages.hpp"
#include "net/credentials.hpp"
#include "tools/cluster_client.hpp"
#include "tools/machine.hpp"
#include "tools/progress_printer.hpp"

namespace po = boost::program_options;
using namespace cohort;

namespace {

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr const char* default_address = "127.0.0.1:7411";

const char* usage_text =
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
    "  undrain NODE                        make a drained node take placements again\n";

struct options {
  std::string command, arg, address, credentials, nodes, store;
  bool local = false, follow = false, json = false;
  double num_cpus = 0;
  std::optional<double> num_gpus;
};

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

std::unique_ptr<tools::cluster_client> connect(const options& o) {
  if (o.credentials.empty())
    throw config::spec_error("--credentials",
                             "no credentials: give --credentials FILE (or --store DIR) or set "
                             "COHORT_CREDENTIALS (cluster-head writes <store>/cluster/credentials.json)");
  std::optional<std::filesystem::path> store;
  if (!o.store.empty()) store = o.store;
  else store = tools::store_of_credentials(o.credentials);
  return std::make_unique<tools::cluster_client>(
      o.address.empty() && !store ? default_address : o.address, o.credentials, store);
}

// Streams a job's events until it ends. A head that restarts forgets its followers: after a quiet
// spell the client asks again, and follows anew once the link was re-established (to the same
// head, or to a new leader the client moved to when its head stopped answering).
// How long a followed job's status query waits before the client tries the next head.
constexpr std::chrono::seconds quiet_query_timeout{10};

template <class OnEvent>
actors::job_record follow_events(tools::cluster_client& client, const std::string& id,
                                 OnEvent on_event) {
  auto last = client.ask<actors::job_record>(actors::follow_job{id});
  on_event(actors::job_event{last, ""});
  auto connections = client.connections();
  while (!actors::is_terminal(last.state)) {
    auto msg = client.next(std::chrono::seconds(5));
    if (msg) {
      if (!msg->match_element<actors::job_event>(0)) continue;  // a stale reply
      auto e = msg->get_as<actors::job_event>(0);
      on_event(e);
      last = e.record;
      continue;
    }
    if (client.connections() != connections) {
      connections = client.connections();
      last = client.ask<actors::job_record>(actors::follow_job{id});
    } else {
      last = client.ask<actors::job_record>(actors::job_query{id}, quiet_query_timeout);
    }
    on_event(actors::job_event{last, ""});
  }
  return last;
}

int follow_remote(tools::cluster_client& client, const std::string& id) {
  tools::progress_printer printer(std::cout, ::isatty(STDOUT_FILENO) != 0);
  auto last = follow_events(client, id, [&](const actors::job_event& e) { printer.on_event(e); });
  printer.finish(last);
  return last.state == actors::job_state::succeeded ? exit_ok : exit_failed;
}

// The spec of `submit run`, with what can be checked before the first attempt: a spec over the
// size and depth limits, a missing model or data set, a data set that is not one or too small
// for one global batch (where data.train is visible here). Throws config::spec_error.
config::job_spec load_run_spec(const std::string& path) {
  auto spec = config::load_job_spec(path);
  config::check_runnable(spec);
  core::train::check_data_set(spec);
  return spec;
}

int run_local(const options& o) {
  auto spec = load_run_spec(o.arg);
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
  actors::local_cluster cluster(infos);
  auto id = cluster.submit(config::to_json_text(spec));
  std::cout << id << std::endl;
  tools::progress_printer printer(std::cout, ::isatty(STDOUT_FILENO) != 0);
  auto last = cluster.follow(id, std::chrono::hours(24 * 365),
                             [&](const actors::job_event& e) { printer.on_event(e); });
  printer.finish(last);
  return last.state == actors::job_state::succeeded ? exit_ok : exit_failed;
}

// The plan's memory section: what one rank needs (item by item, on the GPU and in host RAM) and
// each rank's node. Without a model config (not a causal_lm job): nothing.
nlohmann::json memory_section(const config::job_spec& spec, const core::resources::placement& plan) {
  if (spec.workload != config::workload_kind::causal_lm) return nullptr;
  const auto e = core::train::estimate_memory(spec, core::train::read_model_shape(spec.model));
  const auto& r = e.per_rank;
  nlohmann::json items = nlohmann::json::array();
  for (const auto& i : r.items)
    items.push_back({{"name", i.name}, {"bytes", i.bytes}, {"where", i.on_device ? "gpu" : "host"}});
  nlohmann::json ranks = nlohmann::json::array();
  for (std::size_t i = 0; i < plan.rank_nodes.size(); ++i)
    ranks.push_back({{"rank", i}, {"node", plan.rank_nodes[i]}, {"device_bytes", r.device_bytes},
                     {"host_bytes", r.host_bytes + (i == 0 ? e.rank0_extra_host_bytes : 0)}});
  return {{"parameters", e.model.parameters},
          {"setting", e.setting},
          {"per_rank", {{"device_bytes", r.device_bytes}, {"host_bytes", r.host_bytes},
                        {"steady_host_bytes", r.steady_host_bytes},
                        {"load_peak_host_bytes", r.load_peak_host_bytes},
                        {"activation_bytes", r.activation_bytes}, {"items", items}}},
          {"cuda_context_bytes", spec.scaling.use_gpu ? core::train::cuda_context_bytes : 0.0},
          {"rank0_extra_host_bytes", e.rank0_extra_host_bytes},
          {"ranks", ranks}};
}

void print_plan(const std::string& name, const core::resources::placement& plan,
                const nlohmann::json& memory) {
  using core::train::format_memory;
  std::cout << "job " << name << ": trainer on " << plan.trainer_node << "\n";
  if (memory.is_null()) {
    for (std::size_t i = 0; i < plan.rank_nodes.size(); ++i)
      std::cout << "  rank " << i << " on " << plan.rank_nodes[i] << "\n";
    return;
  }
  for (const auto& rank : memory["ranks"])
    std::cout << "  rank " << rank["rank"].get<int>() << " on " << rank["node"].get<std::string>()
              << ": GPU " << format_memory(rank["device_bytes"].get<double>()) << ", host "
              << format_memory(rank["host_bytes"].get<double>()) << "\n";
  const auto& r = memory["per_rank"];
  std::cout << "memory per rank (" << memory["setting"].get<std::string>() << ", "
            << memory["parameters"].get<std::int64_t>() << " parameters):\n";
  for (const auto& i : r["items"]) {
    std::string label = i["name"].get<std::string>();
    label.resize(std::max<std::size_t>(label.size(), 28), ' ');
    std::cout << "  " << label << " " << format_memory(i["bytes"].get<double>()) << "  "
              << i["where"].get<std::string>() << "\n";
  }
  std::cout << "  GPU " << format_memory(r["device_bytes"].get<double>()) << "; host "
            << format_memory(r["host_bytes"].get<double>()) << " (steady "
            << format_memory(r["steady_host_bytes"].get<double>()) << ", load peak "
            << format_memory(r["load_peak_host_bytes"].get<double>()) << "); rank 0 exports with "
            << format_memory(memory["rank0_extra_host_bytes"].get<double>()) << " more\n";
}

int plan(const options& o) {
  auto spec = config::load_job_spec(o.arg);
  core::resources::placement_result result;
  if (!o.nodes.empty()) {
    // The head's own placement and memory admission, over the listed nodes.
    actors::head_state head;
    for (const auto& n : config::load_nodes_file(o.nodes)) {
      actors::node_info info{n.name, n.resources};
      info.gpu_memory_bytes = n.gpu_memory_bytes;
      head.add_node(info);
    }
    result = head.plan(spec);
  } else {
    auto reply = connect(o)->ask<actors::plan_reply>(actors::plan_request{config::to_json_text(spec)});
    result.status = reply.status == "placed"    ? core::resources::placement_status::placed
                    : reply.status == "pending" ? core::resources::placement_status::pending
                                                : core::resources::placement_status::infeasible;
    result.reason = reply.reason;
    result.plan.trainer_node = reply.trainer_node;
    result.plan.rank_nodes = reply.rank_nodes;
  }
  if (result.status != core::resources::placement_status::placed) {
    std::cerr << "submit plan: no placement for job " << spec.name << " ("
              << core::resources::to_string(result.status) << "): " << result.reason << "\n";
    return exit_usage;
  }
  const auto memory = memory_section(spec, result.plan);
  if (!o.json) {
    print_plan(spec.name, result.plan, memory);
    return exit_ok;
  }
  auto out = nlohmann::json::parse(core::resources::plan_json_text(result.plan));
  if (!memory.is_null()) out["memory"] = memory;
  std::cout << out.dump() << "\n";
  return exit_ok;
}

// "0,1" for GPU indices.
std::string index_list(const std::vector<std::int32_t>& gpus) {
  std::string out;
  for (auto g : gpus) out += (out.empty() ? "" : ",") + std::to_string(g);
  return out;
}

// One line per node: its GPUs, their model and memory.
void print_nodes(const std::vector<actors::node_info>& nodes) {
  for (const auto& n : nodes) {
    auto gpus = n.resources.find("GPU");
    std::cout << "  node " << n.name << " (" << n.address << "): ";
    if (n.drain_state == "preempted") std::cout << "draining (it got SIGTERM and is leaving; no new placement), ";
    if (n.drain_state == "drained") std::cout << "drained (no new placement until `submit undrain " << n.name << "`), ";
    if (gpus == n.resources.end() || gpus->second <= 0) {
      std::cout << "no GPUs" << (n.gpu_note.empty() ? "" : " (" + n.gpu_note + ")") << "\n";
      continue;
    }
    std::cout << core::resources::format_quantity(gpus->second)
              << (gpus->second == 1 ? " GPU " : " GPUs ") << n.accelerator_type << ", "
              << core::resources::format_quantity(
                     std::round(static_cast<double>(n.gpu_memory_bytes) / (1 << 20) / 1024 * 10) / 10)
              << " GiB each\n";
  }
}

void print_record(const actors::job_record& r) {
  std::cout << r.id << " (" << r.name << ") " << to_string(r.state) << ": " << r.reason << "\n";
  if (!r.trainer_node.empty()) {
    std::cout << "  trainer on " << r.trainer_node << "; ranks on";
    for (std::size_t i = 0; i < r.rank_nodes.size(); ++i) {
      std::cout << " " << i << "=" << r.rank_nodes[i];
      if (i < r.rank_gpus.size() && !r.rank_gpus[i].empty())
        std::cout << "[GPU " << index_list(r.rank_gpus[i]) << "]";
    }
    std::cout << "\n";
  }
  std::cout << "  attempts " << r.attempts << ", step " << r.step << "/" << r.total_steps
            << ", loss " << r.loss;
  if (r.checkpoint_step > 0) std::cout << ", last checkpoint at step " << r.checkpoint_step;
  std::cout << "\n  failures " << r.failures.size() << ", preemptions " << r.preemptions << "\n";
  if (r.held_before_step > 0)
    std::cout << "  held before step " << r.held_before_step << " (run.hold_before_step): `submit release "
              << r.id << "` lets it go on\n";
  for (const auto& f : r.failures)
    std::cout << "  attempt " << f.attempt + 1 << " failed: "
              << (f.rank >= 0 ? "rank " + std::to_string(f.rank) : std::string("trainer"))
              << " on " << f.node << ": " << f.reason << "\n";
  for (const auto& f : r.failures) {
    if (f.report.empty()) continue;
    std::cout << "  crash report of attempt " << f.attempt + 1 << ", rank " << f.rank << " (pid "
              << f.pid << "):\n";
    std::size_t begin = 0;
    while (begin < f.report.size()) {
      auto end = f.report.find('\n', begin);
      if (end == std::string::npos) end = f.report.size();
      std::cout << "    " << f.report.substr(begin, end - begin) << "\n";
      begin = end + 1;
    }
  }
}

void print_log(const actors::log_line& l) {
  std::cout << "(worker rank=" << l.rank << " node=" << l.node << " pid=" << l.pid << ") "
            << l.text << "\n";
}

int remote(const options& o) {
  if (o.command == "run") {
    auto spec = load_run_spec(o.arg);
    auto client = connect(o);
    auto accepted = client->ask<actors::job_accepted>(actors::submit_job{config::to_json_text(spec)});
    std::cout << accepted.job_id << std::endl;
    return o.follow ? follow_remote(*client, accepted.job_id) : exit_ok;
  }
  auto client = connect(o);
  if (o.command == "status") {
    auto r = client->ask<actors::job_record>(actors::job_query{o.arg});
    // The nodes the job runs on, with their GPUs.
    std::vector<actors::node_info> nodes;
    for (auto& n : client->ask<actors::job_list>(actors::job_list_query{}).nodes)
      if (std::find(r.rank_nodes.begin(), r.rank_nodes.end(), n.name) != r.rank_nodes.end())
        nodes.push_back(std::move(n));
    if (o.json) {
      auto out = actors::to_json(r);
      out["nodes"] = nlohmann::json::array();
      for (const auto& n : nodes) out["nodes"].push_back(actors::to_json(n));
      std::cout << out.dump() << "\n";
    } else {
      print_record(r);
      print_nodes(nodes);
    }
    return exit_ok;
  }
  if (o.command == "list") {
    auto list = client->ask<actors::job_list>(actors::job_list_query{});
    if (o.json) {
      auto jobs = nlohmann::json::array();
      for (const auto& r : list.jobs) jobs.push_back(actors::to_json(r));
      auto nodes = nlohmann::json::array();
      for (const auto& n : list.nodes) nodes.push_back(actors::to_json(n));
      std::cout << nlohmann::json{{"jobs", jobs}, {"nodes", nodes}}.dump() << "\n";
    } else {
      for (const auto& r : list.jobs)
        std::cout << r.id << "  " << r.name << "  " << to_string(r.state) << "  attempts "
                  << r.attempts << "  " << r.reason << "\n";
      std::cout << "nodes:\n";
      print_nodes(list.nodes);
    }
    return exit_ok;
  }
  if (o.command == "checkpoint") {
    auto r = client->ask<actors::job_record>(actors::checkpoint_job{o.arg});
    std::cout << "checkpoint requested: job " << r.id << " saves one after its next step\n";
    return exit_ok;
  }
  if (o.command == "release") {
    auto r = client->ask<actors::job_record>(actors::release_job{o.arg});
    if (r.held_before_step > 0)
      std::cout << "released: job " << r.id << " goes on with step " << r.held_before_step << "\n";
    else
      std::cout << "released: job " << r.id << " goes on without holding at run.hold_before_step\n";
    return exit_ok;
  }
  if (o.command == "drain" || o.command == "undrain") {
    const bool drain = o.command == "drain";
    auto r = client->ask<actors::drain_reply>(actors::drain_node{o.arg, drain});
    if (!drain) {
      std::cout << "node " << r.node << " is schedulable again\n";
      return exit_ok;
    }
    std::cout << "node " << r.node << " drained: no new placement on it until `submit undrain " << r.node
              << "`";
    if (r.jobs.empty()) std::cout << "; no job had ranks there\n";
    else {
      std::cout << "; preempted (emergency checkpoint, then restart elsewhere):";
      for (const auto& j : r.jobs) std::cout << " " << j;
      std::cout << "\n";
    }
    return exit_ok;
  }
  if (o.command == "stop") {
    auto r = client->ask<actors::job_record>(actors::stop_job{o.arg});
    print_record(r);
    return exit_ok;
  }
  if (o.command == "logs") {
    auto logs = client->ask<actors::job_logs>(actors::logs_query{o.arg});
    for (const auto& l : logs.lines) print_log(l);
    std::cout.flush();
    if (!o.follow) return exit_ok;
    follow_events(*client, o.arg, [](const actors::job_event& e) {
      if (e.line.rfind("(worker ", 0) == 0) std::cout << e.line << std::endl;
    });
    return exit_ok;
  }
  std::cerr << "submit: unknown command \"" << o.command << "\"\n" << usage_text;
  return exit_usage;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that went away must show up as EPIPE on its connection, not end this process.
  ::signal(SIGPIPE, SIG_IGN);
  po::options_description desc("options");
  desc.add_options()
      ("help,h", "show this help")
      ("address", po::value<std::string>(),
       "the heads, HOST:PORT[,HOST:PORT...]: the one that leads answers (default $COHORT_ADDRESS, "
       "else the store's leader record, else 127.0.0.1:7411)")
      ("store", po::value<std::string>(),
       "the cluster store, when this client shares it: the leader is found from its leader record "
       "and the credentials default to <store>/cluster/credentials.json")
      ("credentials", po::value<std::string>(), "the cluster's credentials file (default $COHORT_CREDENTIALS)")
      ("local", "run on a cluster embedded in this process")
      ("nodes", po::value<std::string>(), "NODES.json: the nodes to plan for, or to embed with --local")
      ("num-cpus", po::value<double>()->default_value(0), "CPUs of the embedded node (0: this machine's)")
      ("num-gpus", po::value<double>(),
       "GPUs of the embedded node (default: every GPU found; CUDA_VISIBLE_DEVICES honoured)")
      ("follow,f", "stream progress (run) or output (logs) until the job ends")
      ("json", "print JSON (plan, status, list)")
      ("command", po::value<std::string>(), "")
      ("arg", po::value<std::string>(), "");
  po::positional_options_description positional;
  positional.add("command", 1).add("arg", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "submit: " << e.what() << "\n" << usage_text;
    return exit_usage;
  }
  if (vm.count("help") || !vm.count("command")) {
    std::cout << usage_text << "\n" << desc;
    return vm.count("help") ? exit_ok : exit_usage;
  }
  options o;
  o.command = vm["command"].as<std::string>();
  o.arg = vm.count("arg") ? vm["arg"].as<std::string>() : "";
  o.address = vm.count("address") ? vm["address"].as<std::string>() : tools::env_or("COHORT_ADDRESS", "");
  o.store = vm.count("store") ? vm["store"].as<std::string>() : "";
  if (o.store.rfind("etcd://", 0) == 0) {
    std::cerr << "submit: --store " << o.store
              << ": an etcd store names no head; give --address HEAD[,HEAD...] and --credentials "
                 "FILE (<keys-dir>/cluster/credentials.json of cluster-head)\n";
    return exit_usage;
  }
  o.credentials = vm.count("credentials") ? vm["credentials"].as<std::string>()
                                          : tools::env_or("COHORT_CREDENTIALS", "");
  if (o.credentials.empty() && !o.store.empty())
    o.credentials = net::credentials_file_in(o.store).string();
  o.nodes = vm.count("nodes") ? vm["nodes"].as<std::string>() : "";
  o.local = vm.count("local") != 0;
  o.follow = vm.count("follow") != 0;
  o.json = vm.count("json") != 0;
  o.num_cpus = vm["num-cpus"].as<double>();
  if (vm.count("num-gpus")) o.num_gpus = vm["num-gpus"].as<double>();
  const bool needs_arg = o.command != "list";
  if (needs_arg && o.arg.empty()) {
    std::cerr << "submit " << o.command << ": "
              << (o.command == "run" || o.command == "plan"          ? "JOB.json"
                  : o.command == "drain" || o.command == "undrain" ? "NODE (a node name)"
                                                                   : "JOB (a job id)")
              << " is missing\n" << usage_text;
    return exit_usage;
  }
  try {
    if (o.command == "plan") return plan(o);
    if (o.command == "run" && (o.local || (o.address.empty() && o.store.empty()))) return run_local(o);
    return remote(o);
  } catch (const config::spec_error& e) {
    std::cerr << "submit: " << e.what() << "\n";
    return exit_usage;
  } catch (const std::exception& e) {
    std::cerr << "submit: " << e.what() << "\n";
    return exit_failed;
  }
}

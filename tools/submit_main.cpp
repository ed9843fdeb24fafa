// submit: the user's client, light enough to run in a shell loop: it links no libtorch and no
// actor system, and starts in milliseconds.
//   submit plan JOB.json [--nodes NODES.json]   where the job would run (the live cluster, or
//                                               NODES.json offline)
//   submit run JOB.json [--follow]              submit to the cluster (--local: embedded cluster)
//   submit status JOB [--json] | list [--json] | logs JOB [-f] | checkpoint JOB | release JOB
//   | stop JOB | drain NODE | undrain NODE | metrics-token
// The cluster is --address / $COHORT_ADDRESS (a list of heads: the one that leads answers; a
// standby's "not the leader; the leader is X" is followed) with --credentials /
// $COHORT_CREDENTIALS; a client that shares the store (--store, or a credentials file inside it)
// also finds the leader from the store's leader record. What needs the engine runs in
// cohort-local, the program beside this one, with the same arguments: `run` without any address
// or store (or with --local) on a cluster embedded there, and `plan --nodes` (the head's placement
// and memory rules over listed nodes). The head computes a live plan's memory itself.
// Exit codes: 0 ok (a followed job SUCCEEDED), 1 job failed or cluster error, 2 usage or bad input.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "config/job_spec.hpp"
#include "core/resources/placement.hpp"
#include "core/train/job_preflight.hpp"
#include "net/bridge_messages.hpp"
#include "net/credentials.hpp"
#include "net/json_inspector.hpp"
#include "tools/cluster_client.hpp"
#include "tools/plan_output.hpp"
#include "tools/progress_printer.hpp"
#include "tools/submit_options.hpp"

using namespace cohort;
using tools::exit_failed;
using tools::exit_ok;
using tools::exit_usage;
using options = tools::submit_options;

namespace {

int follow_remote(tools::cluster_client& client, const std::string& id) {
  tools::progress_printer printer(std::cout, ::isatty(STDOUT_FILENO) != 0);
  auto last = tools::follow_job_events(client, id, client.ask(actors::follow_job{id}),
                                       [&](const actors::job_event& e) { printer.on_event(e); });
  printer.finish(last);
  return last.state == actors::job_state::succeeded ? exit_ok : exit_failed;
}

// `submit plan JOB` against the live cluster: the head places the job on its nodes and computes
// what each rank needs (it reads the model's config.json; nothing is started).
int plan(const options& o) {
  auto spec = config::load_job_spec(o.arg);
  auto reply = tools::connect(o)->ask(actors::plan_request{config::to_json_text(spec)});
  if (reply.status != "placed") {
    std::cerr << "submit plan: no placement for job " << spec.name << " (" << reply.status
              << "): " << reply.reason << "\n";
    return exit_usage;
  }
  core::resources::placement placement;
  placement.trainer_node = reply.trainer_node;
  placement.rank_nodes = reply.rank_nodes;
  if (o.json) std::cout << tools::plan_json(placement, reply.memory).dump() << "\n";
  else tools::print_plan(std::cout, spec.name, placement, reply.memory);
  return exit_ok;
}

// Replaces this process with cohort-local (the same directory as this program) given the same
// arguments. Returns only when it cannot be started.
int exec_local(char** argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto program = (ec ? std::filesystem::path(argv[0]).parent_path() : self.parent_path()) / "cohort-local";
  std::string name = "cohort-local";
  argv[0] = name.data();
  ::execv(program.c_str(), argv);
  std::cerr << "submit: cannot start " << program.string() << " (" << std::strerror(errno)
            << "): `submit --local` and `submit plan --nodes` run there; install it beside submit, "
               "or give the cluster with --address\n";
  return exit_failed;
}

// "0,1" for GPU indices.
std::string index_list(const std::vector<std::int32_t>& gpus) {
  std::string out;
  for (auto g : gpus) out += (out.empty() ? "" : ",") + std::to_string(g);
  return out;
}

// A node as `status --json` and `list --json` show it: its record, and "gpus" (how many it offers).
nlohmann::json node_json(const actors::node_info& n) {
  auto out = net::to_json_view(n);
  out["gpus"] = n.resources.count("GPU") != 0 ? n.resources.at("GPU") : 0.0;
  return out;
}

// One line per node: its GPUs, their model and memory.
void print_nodes(const std::vector<actors::node_info>& nodes) {
  for (const auto& n : nodes) {
    auto gpus = n.resources.find("GPU");
    std::cout << "  node " << n.name << " (" << n.address << "): ";
    if (n.drain_state == "preempted")
      std::cout << "draining (it got SIGTERM or a preemption notice and is leaving; no new placement), ";
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
  if (r.eval_step > 0)
    std::cout << "\n  eval_loss " << r.eval_loss << " (perplexity " << r.eval_perplexity << ") at step " << r.eval_step;
  std::cout << "\n  failures " << r.failures.size() << ", preemptions " << r.preemptions;
  if (r.resizes > 0) std::cout << ", grown back " << r.resizes << (r.resizes == 1 ? " time" : " times");
  std::cout << "\n";
  if (r.held_before_step > 0)
    std::cout << "  held before step " << r.held_before_step << " (run.hold_before_step): `submit release "
              << r.id << "` lets it go on\n";
  if (!r.activity.empty()) std::cout << "  " << r.activity << "\n";
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

// ---- The commands that ask a head, one function each ----

int show_status(tools::cluster_client& client, const options& o) {
  auto r = client.ask(actors::job_query{o.arg});
  // The nodes the job runs on, with their GPUs.
  std::vector<actors::node_info> nodes;
  for (auto& n : client.ask(actors::job_list_query{}).nodes)
    if (std::find(r.rank_nodes.begin(), r.rank_nodes.end(), n.name) != r.rank_nodes.end())
      nodes.push_back(std::move(n));
  if (o.json) {
    auto out = net::to_json_view(r);
    out["nodes"] = nlohmann::json::array();
    for (const auto& n : nodes) out["nodes"].push_back(node_json(n));
    std::cout << out.dump() << "\n";
  } else {
    print_record(r);
    print_nodes(nodes);
  }
  return exit_ok;
}

int show_list(tools::cluster_client& client, const options& o) {
  auto list = client.ask(actors::job_list_query{});
  if (o.json) {
    auto jobs = nlohmann::json::array();
    for (const auto& r : list.jobs) jobs.push_back(net::to_json_view(r));
    auto nodes = nlohmann::json::array();
    for (const auto& n : list.nodes) nodes.push_back(node_json(n));
    std::cout << nlohmann::json{{"jobs", jobs}, {"nodes", nodes}}.dump() << "\n";
    return exit_ok;
  }
  for (const auto& r : list.jobs)
    std::cout << r.id << "  " << r.name << "  " << to_string(r.state) << "  attempts " << r.attempts << "  "
              << r.reason << "\n";
  std::cout << "nodes:\n";
  print_nodes(list.nodes);
  return exit_ok;
}

int request_checkpoint(tools::cluster_client& client, const options& o) {
  auto r = client.ask(actors::checkpoint_job{o.arg});
  std::cout << "checkpoint requested: job " << r.id << " saves one after its next step\n";
  return exit_ok;
}

int release(tools::cluster_client& client, const options& o) {
  auto r = client.ask(actors::release_job{o.arg});
  if (r.held_before_step > 0)
    std::cout << "released: job " << r.id << " goes on with step " << r.held_before_step << "\n";
  else
    std::cout << "released: job " << r.id << " goes on without holding at run.hold_before_step\n";
  return exit_ok;
}

int drain(tools::cluster_client& client, const options& o) {
  const bool drain = o.command == "drain";
  auto r = client.ask(actors::drain_node{o.arg, drain});
  if (!drain) {
    std::cout << "node " << r.node << " is schedulable again\n";
    return exit_ok;
  }
  std::cout << "node " << r.node << " drained: no new placement on it until `submit undrain " << r.node
            << "`";
  if (r.jobs.empty()) {
    std::cout << "; no job had ranks there\n";
    return exit_ok;
  }
  std::cout << "; preempted (emergency checkpoint, then restart elsewhere):";
  for (const auto& j : r.jobs) std::cout << " " << j;
  std::cout << "\n";
  return exit_ok;
}

int stop(tools::cluster_client& client, const options& o) {
  print_record(client.ask(actors::stop_job{o.arg}));
  return exit_ok;
}

// The output so far; with --follow every later line too: the head registers the follower where it
// read the lines, so none logged in between is lost. After a move to another head the lines logged
// while no head was followed are in `submit logs`, not here.
int show_logs(tools::cluster_client& client, const options& o) {
  if (!o.follow) {
    for (const auto& l : client.ask(actors::logs_query{o.arg}).lines) print_log(l);
    return exit_ok;
  }
  auto followed = client.ask(actors::follow_logs{o.arg});
  for (const auto& l : followed.lines) print_log(l);
  std::cout.flush();
  tools::follow_job_events(client, o.arg, std::move(followed.record), [](const actors::job_event& e) {
    if (e.line.rfind("(worker ", 0) == 0) std::cout << e.line << std::endl;
  });
  return exit_ok;
}

// One entry per command that asks a head.
struct head_command {
  const char* name;
  int (*run)(tools::cluster_client&, const options&);
};
constexpr head_command head_commands[] = {
    {"status", show_status}, {"list", show_list}, {"checkpoint", request_checkpoint},
    {"release", release},    {"drain", drain},    {"undrain", drain},
    {"stop", stop},          {"logs", show_logs},
};

int remote(const options& o) {
  if (o.command == "metrics-token") {  // from the credentials alone: no head is asked
    if (o.credentials.empty())
      throw config::spec_error("--credentials", "no credentials: give --credentials FILE (or --store DIR) or set "
                                                "COHORT_CREDENTIALS");
    std::cout << net::metrics_token(net::load_credentials(o.credentials)) << "\n";
    return exit_ok;
  }
  if (o.command == "run") {
    auto spec = core::train::load_runnable_spec(o.arg);
    auto client = tools::connect(o);
    auto accepted = client->ask(actors::submit_job{config::to_json_text(spec)});
    std::cout << accepted.job_id << std::endl;
    return o.follow ? follow_remote(*client, accepted.job_id) : exit_ok;
  }
  for (const auto& c : head_commands)
    if (o.command == c.name) {
      auto client = tools::connect(o);
      return c.run(*client, o);
    }
  std::cerr << "submit: unknown command \"" << o.command << "\"\n" << tools::submit_usage;
  return exit_usage;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that went away must show up as EPIPE on its connection, not end this process.
  ::signal(SIGPIPE, SIG_IGN);
  auto parsed = tools::parse_submit_options(argc, argv);
  if (auto* code = std::get_if<int>(&parsed)) return *code;
  const auto& o = std::get<options>(parsed);
  if (tools::runs_without_cluster(o)) return exec_local(argv);
  return tools::exit_code_of([&] { return o.command == "plan" ? plan(o) : remote(o); });
}

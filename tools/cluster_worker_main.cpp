// cluster-worker: one node of a cluster. Connects to the head with the cluster's credentials,
// offers its resources, runs the trainers placed on it and starts each worker in an OS process
// of its own (cohort-worker, next to this program). --address takes a list of heads; the node
// registers with the one that leads (following a standby's redirect, or the store's leader record
// when it shares the store, a directory or etcd) and moves to a new leader when its head dies.
// With --preemption-notice it watches the cloud's preemption notices and drains on one, as on
// SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <variant>

#include <boost/program_options.hpp>
#include <caf/all.hpp>

#include "actors/bridge.hpp"
#include "actors/gateways.hpp"
#include "actors/node_actor.hpp"
#include "actors/scheduler_config.hpp"
#include "actors/worker_process_actor.hpp"
#include "config/nodes_spec.hpp"
#include "core/cloud/preemption_notice.hpp"
#include "core/comm/network_interfaces.hpp"
#include "core/proc/line_output.hpp"
#include "core/store/cluster_store.hpp"
#include "core/store/etcd_client.hpp"
#include "net/credentials.hpp"
#include "tools/cluster_client.hpp"
#include "tools/machine.hpp"
#include "tools/signal_wait.hpp"

namespace po = boost::program_options;
using namespace cohort;

namespace {

using core::proc::say_whole_line;  // the head search's reports and the notice warnings come from threads

// Nodes of other processes, reached through proxies that forward via the gateway.
class remote_node_directory final : public actors::node_directory {
 public:
  remote_node_directory(caf::actor_system& sys, std::string own_name)
      : sys_(sys), own_name_(std::move(own_name)) {}
  void set(caf::actor gateway, caf::actor own_node) {
    std::lock_guard<std::mutex> lock(mutex_);
    gateway_ = std::move(gateway);
    own_node_ = std::move(own_node);
  }
  caf::actor find(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (name == own_name_) return own_node_;
    auto& proxy = proxies_[name];
    if (!proxy) proxy = sys_.spawn(actors::remote_proxy, "node:" + name + "/node", gateway_);
    return proxy;
  }

 private:
  caf::actor_system& sys_;
  std::string own_name_;
  std::mutex mutex_;
  caf::actor gateway_, own_node_;
  std::map<std::string, caf::actor> proxies_;
};

// Why no leader welcomed the node, for the user.
std::string join_failure(const net::link_status& link, const std::string& address,
                         const std::string& standby_said, const std::string& credentials,
                         double timeout_s) {
  std::ostringstream out;
  out << "cannot join the head at " << address << ": ";
  if (!standby_said.empty()) {
    out << "no head leads within " << timeout_s << " s (" << standby_said << ")";
  } else if (link.state == net::link_state::refused) {
    out << "the head refused this node's key (" << credentials
        << " belongs to another cluster, or is stale)";
  } else if (link.failed_handshakes > 0) {
    out << "the server key in " << credentials << " did not authenticate (the CURVE handshake "
        << "failed " << link.failed_handshakes << " time(s) in " << timeout_s
        << " s): the file holds another cluster's keys, or stale ones";
  } else {
    out << "no answer within " << timeout_s << " s (is cluster-head running there?)";
  }
  return out.str();
}

// Where this node's ranks run their collectives, checked, in words for the node's start lines.
// `interface` (--collective-interface) becomes GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME of this
// process, which its worker processes inherit (a job's runtime_env.env_vars still override them).
// Without it, variables already in the environment are used as they are (checked too); else Gloo
// listens on --node-address, and NCCL is given the interface that holds it
// (NCCL_SOCKET_IFNAME==IFACE) unless that is loopback (one machine: NCCL's own choice, as before).
// Throws std::invalid_argument naming the option or variable and the machine's interfaces when
// the interface or the address is not here.
std::string set_up_collectives(const std::string& node_address, const std::string& interface) {
  const auto interfaces = core::comm::list_network_interfaces();
  const auto held_by = core::comm::interface_of_address(node_address, interfaces);
  const auto loopback = [&](const std::string& name) {
    for (const auto& i : interfaces)
      if (i.name == name) return i.loopback;
    return false;
  };
  if (!held_by)
    throw std::invalid_argument("--node-address " + node_address +
                                ": no network interface of this machine holds it, so "
                                "this node's ranks could not listen there; give an address of one of: " +
                                core::comm::describe_network_interfaces(interfaces));
  if (!interface.empty()) {
    if (const auto why = core::comm::check_gloo_interface(interface, interfaces); !why.empty())
      throw std::invalid_argument("--collective-interface " + interface + ": " + why);
    ::setenv("GLOO_SOCKET_IFNAME", interface.c_str(), 1);
    ::setenv("NCCL_SOCKET_IFNAME", ("=" + interface).c_str(), 1);
    return "collectives on interface " + interface + " (--collective-interface)";
  }
  const std::string gloo = tools::env_or("GLOO_SOCKET_IFNAME", "");
  const std::string nccl = tools::env_or("NCCL_SOCKET_IFNAME", "");
  if (!gloo.empty())
    if (const auto why = core::comm::check_gloo_interface(gloo, interfaces); !why.empty())
      throw std::invalid_argument("GLOO_SOCKET_IFNAME (in the environment): " + why);
  if (!nccl.empty())
    if (const auto why = core::comm::check_nccl_socket_ifname(nccl, interfaces); !why.empty())
      throw std::invalid_argument("NCCL_SOCKET_IFNAME (in the environment): " + why);
  if (nccl.empty() && !loopback(*held_by)) ::setenv("NCCL_SOCKET_IFNAME", ("=" + *held_by).c_str(), 1);
  if (!gloo.empty()) return "collectives (Gloo) on interface " + gloo + " (GLOO_SOCKET_IFNAME)";
  return "collectives on " + node_address + " (interface " + *held_by + ")";
}

// "" when --node-address is one the other nodes can reach, as far as this machine can tell; else
// why not: a loopback address (127.0.0.1, the default) while a head in `heads` (HOST:PORT) is on
// another machine, where every node but this one would dial its own loopback (the rendezvous
// store of a trainer placed here, this node's Gloo ranks).
std::string loopback_for_remote_heads(const std::string& node_address,
                                      const std::vector<std::string>& heads) {
  const auto interfaces = core::comm::list_network_interfaces();
  const auto held_by = core::comm::interface_of_address(node_address, interfaces);
  const auto loopback = std::find_if(interfaces.begin(), interfaces.end(), [&](const auto& i) {
    return held_by && i.name == *held_by && i.loopback;
  });
  if (loopback == interfaces.end()) return "";
  for (const auto& head : heads) {
    const auto host = head[0] == '[' ? head.substr(1, head.find(']') - 1) : head.substr(0, head.rfind(':'));
    if (core::comm::is_this_machine(host, interfaces) == false)
      return "--node-address " + node_address + " is reachable from this machine only, but the head at " +
             head +
             " is on another machine: give --node-address an address of this machine that the "
             "other nodes reach (this machine's interfaces: " +
             core::comm::describe_network_interfaces(interfaces) + ")";
  }
  return "";
}

po::options_description option_table(const std::string& host) {
  po::options_description desc(
      "usage: cluster-worker --address HOST:PORT[,HOST:PORT...] --credentials FILE [options]");
  desc.add_options()("help,h", "show this help")(
      "address", po::value<std::string>(),
      "the heads, HOST:PORT[,HOST:PORT...]: the node registers with the one that leads (default "
      "$COHORT_ADDRESS; may be left out when the credentials file lies in the store)")(
      "store", po::value<std::string>(),
      "the cluster store, when this node shares it: a directory (default: the store the "
      "credentials file lies in, if it does) or etcd://HOST:PORT[,HOST:PORT...][/prefix]; the "
      "leader is found from its leader record, and again after every failover")(
      "credentials", po::value<std::string>(),
      "the cluster's credentials file (default $COHORT_CREDENTIALS)")(
      "name", po::value<std::string>()->default_value(host), "this node's name")(
      "node-address", po::value<std::string>()->default_value("127.0.0.1"),
      "the address other nodes reach this one at (rendezvous store, Gloo); an interface of this "
      "machine must hold it")(
      "collective-interface", po::value<std::string>(),
      "the network interface this node's ranks run collectives on (sets GLOO_SOCKET_IFNAME and "
      "NCCL_SOCKET_IFNAME for them; default: the interface that holds --node-address)")(
      "num-cpus", po::value<double>(), "CPUs offered (default: this machine's)")(
      "num-gpus", po::value<double>(),
      "GPUs offered (default: every GPU found through NVML; CUDA_VISIBLE_DEVICES honoured)")(
      "memory", po::value<double>(), "bytes of memory offered (default: this machine's)")(
      "resources", po::value<std::string>(), "custom resources as JSON, e.g. '{\"large_cpu_mem\": 1}'")(
      "worker-program", po::value<std::string>(),
      "the worker program (default: cohort-worker next to this one)")(
      "heartbeat-interval", po::value<double>()->default_value(1.0), "seconds between heartbeats")(
      "connect-timeout", po::value<double>()->default_value(30.0),
      "seconds to wait for the first connection to the head; exits 1 naming why when it does "
      "not come (no answer, or the head's key did not authenticate)")(
      "preemption-notice", po::value<std::string>(),
      "aws, gcp, azure or URL: watch the cloud's preemption notices in the instance metadata (AWS "
      "spot instance-action with an IMDSv2 token, every 5 s; GCP instance/preempted, every second; "
      "Azure Scheduled Events Preempt/Terminate of this VM, every second, approved once drained) "
      "and drain the node on one, as on SIGTERM (waiting for its workers until the notice's "
      "deadline at most, plus 15 s). The endpoint moves with "
      "AWS_EC2_METADATA_SERVICE_ENDPOINT=http://HOST[:PORT] (aws) and GCE_METADATA_HOST=HOST[:PORT] "
      "(gcp); URL: http://HOST[:PORT]/ followed by one of latest/meta-data/spot/instance-action, "
      "computeMetadata/v1/instance/preempted, metadata/scheduledevents")(
      "preemption-poll-interval", po::value<double>(),
      "seconds between two checks of --preemption-notice (default: the provider's documented "
      "rate, above)");
  return desc;
}

// The command line, checked.
struct worker_settings {
  std::string address;  // the heads given ("" : found in the store)
  std::optional<std::filesystem::path> store;
  std::string credentials_file;
  actors::head_search_options search;
  actors::node_info info;
  std::string collectives;  // where this node's ranks run collectives, for its start line
  core::resources::gpu_discovery gpus;
  double connect_timeout_s = 30;
  double heartbeat_interval_s = 1;
  std::string program;  // the worker program
  std::optional<core::cloud::notice_source> notices;  // --preemption-notice
};

// --preemption-notice and --preemption-poll-interval, checked. A message when they are wrong.
std::string watch_notices(const po::variables_map& vm, worker_settings& s) {
  if (vm.count("preemption-poll-interval") && !vm.count("preemption-notice"))
    return "--preemption-poll-interval needs --preemption-notice";
  if (!vm.count("preemption-notice")) return "";
  try {
    s.notices =
        core::cloud::parse_notice_source(vm["preemption-notice"].as<std::string>(), "--preemption-notice",
                                         [](const char* name) { return tools::env_or(name, ""); });
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  if (vm.count("preemption-poll-interval")) {
    const double seconds = vm["preemption-poll-interval"].as<double>();
    if (!(seconds > 0) || !std::isfinite(seconds))
      return "--preemption-poll-interval must be positive seconds (default: the provider's documented rate)";
    s.notices->interval = std::chrono::milliseconds(std::max<long>(1, std::lround(seconds * 1000)));
  }
  return "";
}

// Where the cluster is: the heads, the store, the credentials. A message when they do not add up.
std::string locate_cluster(const po::variables_map& vm, worker_settings& s) {
  s.address = vm.count("address") ? vm["address"].as<std::string>() : tools::env_or("COHORT_ADDRESS", "");
  if (vm.count("store")) s.store = vm["store"].as<std::string>();
  const bool on_etcd = s.store && core::store::is_etcd_location(s.store->string());
  if (on_etcd) {
    try {
      core::store::parse_etcd_location(s.store->string());
    } catch (const std::exception& e) {
      return "--store " + s.store->string() + ": " + e.what() +
             " (allowed: etcd://HOST:PORT[,HOST:PORT...][/prefix] or a directory)";
    }
    // etcd keeps no keys: they lie where cluster-head's --keys-dir put them.
    if (!vm.count("credentials") && tools::env_or("COHORT_CREDENTIALS", "").empty())
      return "--store " + s.store->string() +
             " is an etcd store, which holds no credentials: give --credentials FILE (or set "
             "COHORT_CREDENTIALS), <keys-dir>/cluster/credentials.json of cluster-head";
  }
  s.credentials_file = vm.count("credentials") ? vm["credentials"].as<std::string>()
                       : s.store && !on_etcd && tools::env_or("COHORT_CREDENTIALS", "").empty()
                           ? net::credentials_file_in(*s.store).string()
                           : tools::env_or("COHORT_CREDENTIALS", "");
  if (!s.store && !s.credentials_file.empty()) s.store = tools::store_of_credentials(s.credentials_file);
  if ((s.address.empty() && !s.store) || s.credentials_file.empty())
    return "--address (or COHORT_ADDRESS, or --store) and --credentials (or COHORT_CREDENTIALS) are required";
  try {
    if (!s.address.empty()) s.search.addresses = net::parse_head_addresses(s.address);
  } catch (const std::exception& e) {
    return std::string("--address: ") + e.what();
  }
  if (s.store) s.search.store_leader = tools::store_leader_reader(*s.store);
  s.search.report = [name = vm["name"].as<std::string>()](const std::string& line) {
    say_whole_line(std::cout, "cluster-worker: node " + name + " " + line);
  };
  return "";
}

// What this node is and offers: its name and address, where its collectives run, its CPUs,
// memory, GPUs and custom resources. A message when something is wrong.
std::string describe_node(const po::variables_map& vm, worker_settings& s) {
  auto& info = s.info;
  info.name = vm["name"].as<std::string>();
  info.address = vm["node-address"].as<std::string>();
  try {
    s.collectives = set_up_collectives(
        info.address, vm.count("collective-interface") ? vm["collective-interface"].as<std::string>() : "");
    if (const auto why = loopback_for_remote_heads(info.address, s.search.addresses); !why.empty())
      throw std::invalid_argument(why);
    info.resources["CPU"] = vm.count("num-cpus") ? vm["num-cpus"].as<double>() : tools::machine_cpus();
    info.resources["memory"] = vm.count("memory") ? vm["memory"].as<double>() : tools::machine_memory_bytes();
    if (vm.count("resources"))
      for (const auto& [k, v] :
           config::parse_resources_json(vm["resources"].as<std::string>(), "--resources")) {
        if (k == "GPU" || k.rfind("accelerator_type:", 0) == 0)
          throw config::spec_error("--resources." + k,
                                   "GPUs are found on the machine; give --num-gpus N to offer fewer");
        info.resources[k] = v;
      }
    s.gpus = tools::machine_gpu_offer(
        vm.count("num-gpus") ? std::optional<double>(vm["num-gpus"].as<double>()) : std::nullopt,
        "--num-gpus");
    tools::add_gpu_offer(info, s.gpus);
  } catch (const std::exception&
               e) {  // std::invalid_argument, std::system_error, config::spec_error, resource_error
    return e.what();
  }
  for (const auto& [k, v] : info.resources)
    if (v < 0) return "resource " + k + " must not be negative";
  return "";
}

// Parses and checks the command line: the settings, or the exit code (help: 0; bad: 2, said).
std::variant<worker_settings, int> parse_settings(int argc, char** argv) {
  char host[256] = "node";
  ::gethostname(host, sizeof host - 1);
  const auto desc = option_table(host);
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "cluster-worker: " << e.what() << "\n" << desc;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc;
    return 0;
  }
  worker_settings s;
  std::string problem = locate_cluster(vm, s);
  if (problem.empty()) problem = describe_node(vm, s);
  if (problem.empty()) problem = watch_notices(vm, s);
  s.connect_timeout_s = vm["connect-timeout"].as<double>();
  s.heartbeat_interval_s = vm["heartbeat-interval"].as<double>();
  if (problem.empty() && !(s.connect_timeout_s > 0)) problem = "--connect-timeout must be positive seconds";
  s.program =
      vm.count("worker-program")
          ? vm["worker-program"].as<std::string>()
          : (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "cohort-worker").string();
  if (problem.empty() && !std::filesystem::exists(s.program))
    problem = "worker program " + s.program + " does not exist";
  if (!problem.empty()) {
    std::cerr << "cluster-worker: " << problem << "\n";
    return 2;
  }
  return s;
}

// A cloud's preemption notice, from the watch's thread to the main thread.
class notice_slot {
 public:
  void put(const core::cloud::preemption_notice& n) {
    std::lock_guard<std::mutex> lock(mutex_);
    notice_ = n;
  }
  std::optional<core::cloud::preemption_notice> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    auto n = std::move(notice_);
    notice_.reset();
    return n;
  }

 private:
  std::mutex mutex_;
  std::optional<core::cloud::preemption_notice> notice_;
};

// The drain a preemption notice asks for: its reason (what the provider said, and when the VM
// goes) and deadline.
actors::begin_drain notice_drain(const core::cloud::preemption_notice& n) {
  const auto left =
      std::chrono::duration_cast<std::chrono::seconds>(n.deadline - std::chrono::system_clock::now()).count();
  return {"the cloud's preemption notice: " + n.what +
              (left > 0 ? ", in " + std::to_string(left) + " s" : ", due now"),
          n.deadline};
}

// Runs until a signal, a preemption notice (when `watch` checks for them) or until the node or its
// link ends. SIGTERM (what an orchestrator sends) and a notice start a drain: the node tells the
// head it leaves, the jobs with ranks here save an emergency checkpoint and are stopped, and the
// node exits once its workers are gone (or at its drain deadline, by the notice's at the latest).
// Once drained after an Azure notice, the event is approved. SIGINT, a second signal, or a lost
// link to the head end it at once.
void serve_until_stopped(caf::actor_system& sys, const std::string& name, const caf::actor& gateway,
                         const caf::actor& node, core::cloud::notice_watch* watch, notice_slot& notices) {
  std::atomic<bool> gateway_gone{false}, node_gone{false};
  const auto watch_actor = [&sys](const caf::actor& who, std::atomic<bool>& gone) {
    return std::thread([&sys, who, &gone] {
      caf::scoped_actor self{sys};
      self->monitor(who);
      self->receive([](caf::down_msg&) {});
      gone = true;
      ::kill(::getpid(), SIGINT);
    });
  };
  std::thread watcher = watch_actor(gateway, gateway_gone), node_watcher = watch_actor(node, node_gone);
  std::optional<actors::begin_drain> drain;
  std::string got;
  while (!drain) {
    // With notices watched, the slot is looked at 5 times a second between signals.
    const int sig = watch ? tools::wait_for_termination_signal_for(std::chrono::milliseconds(200))
                          : tools::wait_for_termination_signal();
    if (sig == SIGTERM) {
      drain = actors::begin_drain{"SIGTERM to its cluster-worker, a preemption notice"};
      got = "got SIGTERM";
    } else if (sig != 0) {
      break;
    } else if (const auto n = notices.take()) {
      drain = notice_drain(*n);
      got = "got the cloud's preemption notice (" + n->what + ")";
    }
  }
  if (drain && !gateway_gone && !node_gone) {
    say_whole_line(std::cout, "cluster-worker: node " + name + " " + got +
                                  ": draining (its jobs save an emergency checkpoint and move to other "
                                  "nodes); it exits once its workers stopped");
    caf::anon_send(node, *drain);
    while (!node_gone && !gateway_gone) {
      const int again = tools::wait_for_termination_signal_for(std::chrono::milliseconds(200));
      if (again == SIGTERM || (again == SIGINT && !node_gone && !gateway_gone)) break;
    }
    say_whole_line(std::cout, "cluster-worker: node " + name +
                                  (node_gone ? " drained: exiting" : " exiting before its drain ended"));
    if (watch && node_gone) {
      if (const auto problem = watch->acknowledge(); !problem.empty())
        say_whole_line(std::cerr,
                       "cluster-worker: node " + name + ": cannot approve the preemption event: " + problem);
    }
  }
  caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
  if (node) caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  watcher.join();
  node_watcher.join();
}

// The node: its actors, joined to the leader, until stopped. The exit code.
int run_node(const worker_settings& s) {
  auto creds = net::load_credentials(s.credentials_file);
  auto options =
      net::client_options::from(creds, s.search.addresses.empty() ? "" : s.search.addresses.front());
  actors::liveness_options liveness;
  liveness.heartbeat_interval = std::chrono::milliseconds(static_cast<long>(s.heartbeat_interval_s * 1000));
  caf::actor_system_config cfg;
  // Idle threads block (scheduler_config.hpp); the node's actors need few (its workers are
  // processes of their own).
  actors::configure_scheduler(cfg, 2);
  caf::actor_system sys{cfg};
  const auto& info = s.info;
  auto directory = std::make_shared<remote_node_directory>(sys, info.name);
  auto process =
      actors::spawn_node_gateway(sys, info.name, options, liveness, s.search, [&](caf::actor head_proxy) {
        return sys.spawn(actors::node_actor, info, head_proxy, directory,
                         actors::process_workers(s.program, info.gpu_ids,
                                                 static_cast<std::int32_t>(s.gpus.devices.size())),
                         std::make_shared<actors::epoch_fence>());
      });
  directory->set(process.gateway, process.node);
  std::cout << "cluster-worker: node " << info.name << " offers "
            << core::resources::describe_gpus(s.gpus.devices)
            << (s.gpus.note.empty() ? "" : " (" + s.gpus.note + ")") << "; " << s.collectives << std::endl;
  std::cout << "cluster-worker: node " << info.name << " joining "
            << (s.address.empty() ? "the leader in " + s.store->string() : s.address) << std::endl;
  const auto connect_timeout = std::chrono::milliseconds(static_cast<long>(s.connect_timeout_s * 1000));
  if (!process.join->wait_for_welcome(connect_timeout)) {
    const auto tried = s.address.empty() ? process.join->address() : s.address;
    std::cerr << "cluster-worker: "
              << join_failure(process.join->link(), tried.empty() ? "(none named)" : tried,
                              process.join->standby_said(), s.credentials_file, s.connect_timeout_s)
              << std::endl;
    caf::anon_send_exit(process.gateway, caf::exit_reason::user_shutdown);
    if (process.node) caf::anon_send_exit(process.node, caf::exit_reason::user_shutdown);
    return 1;
  }
  // Joined: the gateway's report said "joined the leader at ADDRESS (epoch N)", as it does after
  // every failover.
  notice_slot notices;
  std::unique_ptr<core::cloud::notice_watch> watch;
  if (s.notices) {
    std::ostringstream every;
    every << static_cast<double>(s.notices->interval.count()) / 1000;
    say_whole_line(std::cout, "cluster-worker: node " + info.name + " watches " + s.notices->describe() +
                                  " every " + every.str() + " s");
    watch = std::make_unique<core::cloud::notice_watch>(
        *s.notices, [&notices](const core::cloud::preemption_notice& n) { notices.put(n); },
        [name = info.name](const std::string& warning) {
          say_whole_line(std::cerr, "cluster-worker: node " + name + ": " + warning);
        });
  }
  serve_until_stopped(sys, info.name, process.gateway, process.node, watch.get(), notices);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tools::daemon_main("cluster-worker", argc, argv, parse_settings, run_node);
}

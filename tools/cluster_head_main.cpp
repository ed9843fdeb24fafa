// cluster-head: the head of a cluster. Serves nodes and clients over CURVE on 127.0.0.1 (or
// --bind), keeps every job in the store, and recovers the job table from it when restarted.
// On first start it creates the cluster's keys and <store>/cluster/credentials.json (with an etcd
// store, --store etcd://HOST:PORT[,...][/prefix], under --keys-dir instead).
// A second head on the same store waits as a standby until the leader's lease expires; meanwhile
// it serves its address and answers every client request and node hello with "not the leader;
// the leader is X" (net::not_leader), which clients and nodes follow.
// --storage-root DIR (repeatable) confines the paths jobs name on disk; unset, any path goes.
#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <variant>

#include <boost/program_options.hpp>
#include <caf/all.hpp>

#include "actors/gateways.hpp"
#include "actors/head_actor.hpp"
#include "actors/leader_session.hpp"
#include "actors/scheduler_config.hpp"
#include "actors/store_writer.hpp"
#include "config/storage_roots.hpp"
#include "core/store/cluster_store.hpp"
#include "net/credentials.hpp"
#include "net/head_addresses.hpp"
#include "net/net_error.hpp"
#include "tools/command_line.hpp"
#include "tools/dashboard_server.hpp"
#include "tools/signal_wait.hpp"
#include "tools/standby_responder.hpp"

namespace po = boost::program_options;
using namespace cohort;

namespace {

// The command line, checked.
struct head_settings {
  std::string store_dir;
  bool on_etcd = false;
  std::string keys_dir;  // with an etcd store
  double heartbeat_timeout_s = 6, lease_s = 10, grace_s = 3;
  std::string bind;
  std::uint16_t port = 0;
  std::optional<std::string> advertise;
  std::vector<std::filesystem::path> storage_roots;
  std::optional<std::uint16_t> dashboard_port;
  std::string dashboard_bind;
  std::optional<tools::dashboard_tls> dashboard_tls;
};

po::options_description option_table() {
  po::options_description desc("usage: cluster-head --store DIR|etcd://HOST:PORT[,...][/prefix] [options]");
  desc.add_options()("help,h", "show this help")(
      "store", po::value<std::string>(),
      "the cluster store: a directory on shared storage (the default kind), or an etcd cluster "
      "etcd://[USER@]HOST:PORT[,HOST:PORT...][/prefix] (prefix default /cohort; etcds:// over TLS; "
      "the user's password in COHORT_ETCD_PASSWORD, TLS files in COHORT_ETCD_CA, _CERT, _KEY)")(
      "keys-dir", po::value<std::string>(),
      "with an etcd store: the directory holding the cluster's keys (cluster/credentials.json, "
      "cluster/server_key.json), created on first start; every head of the cluster needs a copy")(
      "port", po::value<std::uint16_t>()->default_value(7411), "port to serve on (0: any free)")(
      "bind", po::value<std::string>()->default_value("127.0.0.1"), "address to serve on")(
      "advertise", po::value<std::string>(),
      "HOST:PORT that nodes and clients reach this head at, published in the store's leader "
      "record and in redirects (default: --bind:--port; this host's name when --bind is 0.0.0.0)")(
      "heartbeat-timeout", po::value<double>()->default_value(6.0),
      "seconds without a heartbeat before a node counts as lost (at most 10 by default)")(
      "lease-ttl", po::value<double>()->default_value(10.0), "seconds the leader lease lasts")(
      "storage-root", po::value<std::vector<std::string>>()->composing(),
      "a directory (repeatable) that every job's paths on disk must lie under: run.storage_path, "
      "data.train, data.eval, model.hf_dir, model.config, model.added_tokens; a job naming another is "
      "refused at "
      "submit. Unset: no restriction (any path the workers can reach)")(
      "dashboard-port", po::value<std::uint16_t>(),
      "serve the read-only dashboard (GET /), its JSON (/api/...) and Prometheus metrics "
      "(GET /metrics) on this port while leading (0: any free); everything but the page needs "
      "`Authorization: Bearer TOKEN`, the token `submit metrics-token` prints. Off unless given")(
      "dashboard-bind", po::value<std::string>()->default_value("127.0.0.1"),
      "address of the dashboard (without --dashboard-cert plain HTTP: keep it on a private interface)")(
      "dashboard-cert", po::value<std::string>(),
      "a PEM certificate (chain) file: the dashboard and /metrics serve HTTPS with it and "
      "--dashboard-key, and plain HTTP not at all")("dashboard-key", po::value<std::string>(),
                                                    "the PEM private key of --dashboard-cert")(
      "step-down-grace", po::value<double>()->default_value(3.0),
      "seconds a head that lost the leadership keeps answering clients with who leads now "
      "before it exits (1)");
  return desc;
}

// --dashboard-cert and --dashboard-key into `s`: both or neither, readable files, with
// --dashboard-port. What is wrong, or nullopt.
std::optional<std::string> read_dashboard_tls(const po::variables_map& vm, head_settings& s) {
  const bool cert = vm.count("dashboard-cert") != 0, key = vm.count("dashboard-key") != 0;
  if (!cert && !key) return std::nullopt;
  if (cert != key)
    return std::string(
        "--dashboard-cert and --dashboard-key go together: give both, or neither for plain HTTP");
  if (!s.dashboard_port) return std::string("--dashboard-cert and --dashboard-key need --dashboard-port");
  tools::dashboard_tls tls{vm["dashboard-cert"].as<std::string>(), vm["dashboard-key"].as<std::string>()};
  for (const auto& [option, file] :
       {std::pair{"--dashboard-cert", tls.cert_file}, std::pair{"--dashboard-key", tls.key_file}}) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec) || ::access(file.c_str(), R_OK) != 0)
      return std::string(option) + " " + file + ": not a readable file (a PEM " +
             (option == std::string("--dashboard-cert") ? "certificate" : "private key") + ")";
  }
  if (auto problem = tools::dashboard_tls_problem(tls)) return problem;
  s.dashboard_tls = std::move(tls);
  return std::nullopt;
}

// Parses and checks the command line: the settings, or the exit code (help: 0; bad: 2, said).
std::variant<head_settings, int> parse_settings(int argc, char** argv) {
  const auto desc = option_table();
  po::variables_map vm;
  if (auto done = tools::read_command_line("cluster-head", argc, argv, desc, vm)) return *done;
  if (!vm.count("store")) {
    std::cerr << "cluster-head: --store DIR is required\n" << desc;
    return 2;
  }
  head_settings s;
  s.store_dir = vm["store"].as<std::string>();
  s.on_etcd = core::store::is_etcd_location(s.store_dir);
  if (s.on_etcd && !vm.count("keys-dir")) {
    std::cerr << "cluster-head: --store " << s.store_dir
              << " is an etcd store: give --keys-dir DIR, where the cluster's keys are kept "
                 "(created on first start; copy it to every head)\n";
    return 2;
  }
  if (!s.on_etcd && vm.count("keys-dir")) {
    std::cerr << "cluster-head: --keys-dir is for an etcd store only; a directory store keeps "
                 "the keys in <store>/cluster/\n";
    return 2;
  }
  if (s.on_etcd) s.keys_dir = vm["keys-dir"].as<std::string>();
  s.heartbeat_timeout_s = vm["heartbeat-timeout"].as<double>();
  s.lease_s = vm["lease-ttl"].as<double>();
  s.grace_s = vm["step-down-grace"].as<double>();
  if (s.heartbeat_timeout_s <= 0 || s.lease_s <= 0 || s.grace_s < 0) {
    std::cerr << "cluster-head: --heartbeat-timeout and --lease-ttl must be positive seconds, "
                 "--step-down-grace at least 0\n";
    return 2;
  }
  s.bind = vm["bind"].as<std::string>();
  s.port = vm["port"].as<std::uint16_t>();
  s.dashboard_bind = vm["dashboard-bind"].as<std::string>();
  if (vm.count("dashboard-port")) s.dashboard_port = vm["dashboard-port"].as<std::uint16_t>();
  if (auto bad = read_dashboard_tls(vm, s)) {
    std::cerr << "cluster-head: " << *bad << "\n";
    return 2;
  }
  try {
    if (vm.count("advertise")) {
      s.advertise = vm["advertise"].as<std::string>();
      if (net::parse_head_addresses(*s.advertise).size() != 1) throw net::net_error("give one HOST:PORT");
    }
  } catch (const std::exception& e) {
    std::cerr << "cluster-head: --advertise: " << e.what() << "\n";
    return 2;
  }
  try {
    if (vm.count("storage-root"))
      s.storage_roots = config::canonical_storage_roots(vm["storage-root"].as<std::vector<std::string>>());
  } catch (const std::invalid_argument& e) {
    std::cerr << "cluster-head: " << e.what() << "\n";
    return 2;
  }
  return s;
}

// A standby's part while another head leads: it answers on this head's address with who leads
// (tools::standby_responder) and stops waiting at a termination signal.
class answering_standby : public actors::standby_role {
 public:
  answering_standby(net::server_options options, std::string address)
      : responder_(std::move(options)), address_(std::move(address)) {}

  void begin(const std::optional<core::store::lease_record>& leader) override {
    try {
      responder_.start(leader);
      std::cout << "cluster-head: another head leads; waiting as a standby, answering on " << address_
                << " with who leads" << std::endl;
    } catch (const std::exception& e) {
      // E.g. a standby on the leader's own port: it still takes over once the leader is gone.
      std::cout << "cluster-head: another head leads; waiting as a standby (cannot answer on " << address_
                << ": " << e.what() << ")" << std::endl;
    }
  }
  void leader_is(const std::optional<core::store::lease_record>& leader) override {
    responder_.update(leader);
  }
  bool stop_within(std::chrono::milliseconds d) override {
    if (tools::wait_for_termination_signal_for(d) == 0) return false;
    std::cout << "cluster-head: stopped (a standby)" << std::endl;
    return true;
  }
  void end() override { responder_.stop(); }  // frees the port for the leader's gateway

 private:
  tools::standby_responder responder_;
  std::string address_;
};

// Leading without serving would keep every standby out: ends the head before it writes more and
// gives the lease back, so that a standby takes over at once. Says so; the exit code (1).
int give_up_leading(caf::actor_system& sys, const caf::actor& head, core::store::cluster_store& store,
                    const actors::head_options& head_opts, const std::string& address,
                    const std::string& why) {
  {
    caf::scoped_actor self{sys};
    self->monitor(head);
    caf::anon_send_exit(head, caf::exit_reason::kill);
    self->receive([](caf::down_msg&) {});
  }
  // The keeper may still be renewing: no renewal after this release.
  const bool released = actors::release_lease(store.lease(), *head_opts.fence, head_opts.epoch);
  std::cerr << "cluster-head: cannot serve on " << address << ": " << why << "; "
            << (released ? "gave the leader lease (epoch " + std::to_string(head_opts.epoch) + ") back"
                         : std::string("the leader lease was already lost"))
            << std::endl;
  return 1;
}

// Runs until a termination signal, or until the head actor quits (it lost the lease): then the
// gateway answers clients with why for `grace_s` seconds before the process exits. The exit code.
int serve_until_stopped(caf::actor_system& sys, const caf::actor& head, const caf::actor& gateway,
                        std::unique_ptr<tools::dashboard_server> dashboard, double grace_s) {
  std::mutex mutex;
  std::condition_variable stopping_changed;
  bool stopping = false;
  std::string stepped_down;
  std::thread watcher([&] {
    caf::scoped_actor self{sys};
    self->monitor(head);
    caf::error reason;
    self->receive([&](caf::down_msg& msg) { reason = msg.reason; });
    std::unique_lock<std::mutex> lock(mutex);
    if (stopping) return;  // the head ended because main is shutting down
    stepped_down = actors::describe(sys, reason);
    std::cerr << "cluster-head: " << stepped_down << std::endl;
    if (!stopping_changed.wait_for(lock, std::chrono::duration<double>(grace_s), [&] { return stopping; }))
      ::kill(::getpid(), SIGTERM);  // wakes main; a signal that came meanwhile already did
  });
  tools::wait_for_termination_signal();
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  stopping_changed.notify_all();
  dashboard.reset();  // no request waits on a head that is going
  caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
  watcher.join();
  std::cout << "cluster-head: stopped" << std::endl;
  return stepped_down.empty() ? 0 : 1;
}

// This head's name in the leader record, and what others reach it at: --advertise, else the
// bound address, else (bound to every interface) this host's name.
std::pair<std::string, std::string> head_id_and_address(const head_settings& s) {
  char host[256] = "head";
  ::gethostname(host, sizeof host - 1);
  const bool wildcard = s.bind == "*" || s.bind == "0.0.0.0" || s.bind == "::";
  return {
      std::string(host) + ":" + std::to_string(::getpid()),
      s.advertise ? *s.advertise : (wildcard ? std::string(host) : s.bind) + ":" + std::to_string(s.port)};
}

// Leads: the head actor on the store, its gateway, the dashboard; until stopped.
int lead(const head_settings& s) {
  auto secrets = net::ensure_cluster_credentials(s.on_etcd ? s.keys_dir : s.store_dir);
  auto store = core::store::open_cluster_store(s.store_dir);
  const auto lease_ttl = std::chrono::milliseconds(static_cast<long>(s.lease_s * 1000));
  auto [head_id, address] = head_id_and_address(s);
  auto options = net::server_options::from(secrets);
  options.bind_address = s.bind;
  options.port = s.port;
  answering_standby standby(options, address);
  const auto lease = actors::acquire_leadership(store->lease(), {head_id, address, lease_ttl}, standby);
  if (!lease) return 0;
  actors::liveness_options liveness;
  liveness.node_timeout = std::chrono::milliseconds(static_cast<long>(s.heartbeat_timeout_s * 1000));

  caf::actor_system_config cfg;
  actors::configure_scheduler(cfg);  // idle threads block (scheduler_config.hpp)
  caf::actor_system sys{cfg};
  actors::head_options head_opts;
  head_opts.store = store;
  head_opts.epoch = lease->epoch;
  head_opts.lease_ttl = lease_ttl;
  head_opts.adoption_grace = liveness.node_timeout * 2;
  head_opts.storage_roots = s.storage_roots;
  head_opts.fence = std::make_shared<actors::lease_fence>();
  auto head = sys.spawn(actors::head_actor, head_opts);
  std::uint16_t port = 0;
  caf::actor gateway;
  try {
    gateway = actors::spawn_head_gateway(sys, head, options, liveness, &port,
                                         net::process_welcome{address, lease->epoch});
  } catch (const std::exception& e) {
    return give_up_leading(sys, head, *store, head_opts, address, e.what());
  }
  if (s.port == 0 && !s.advertise) {
    // Asked for any free port: the lease named ":0" until now; publish the port bound, through the
    // head actor to its lease keeper, the record's one writer while it leads.
    address = address.substr(0, address.rfind(':') + 1) + std::to_string(port);
    caf::anon_send(head, actors::publish_address{address});
  }
  std::cout << "cluster-head: serving on " << options.bind_address << ":" << port << " (store " << s.store_dir
            << ", epoch " << lease->epoch << ")\ncluster-head: credentials "
            << secrets.credentials_file.string() << std::endl;
  std::unique_ptr<tools::dashboard_server> dashboard;
  if (s.dashboard_port) {
    dashboard =
        std::make_unique<tools::dashboard_server>(sys, head, s.dashboard_bind, *s.dashboard_port,
                                                  net::metrics_token(secrets.credentials), s.dashboard_tls);
    std::cout << "cluster-head: dashboard on " << (s.dashboard_tls ? "https" : "http") << "://"
              << s.dashboard_bind << ":" << dashboard->port()
              << "/ and Prometheus metrics on /metrics (bearer token: `submit metrics-token`)" << std::endl;
  }
  if (!s.storage_roots.empty()) {
    std::cout << "cluster-head: job paths confined to";
    for (const auto& r : s.storage_roots) std::cout << " " << r.string();
    std::cout << std::endl;
  }
  return serve_until_stopped(sys, head, gateway, std::move(dashboard), s.grace_s);
}

}  // namespace

int main(int argc, char** argv) {
  return tools::daemon_main("cluster-head", argc, argv, parse_settings, lead);
}

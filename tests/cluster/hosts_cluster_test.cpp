// A cluster across hosts as the seeds run one (network namespaces of host_rig.hpp): a 3-member
// etcd over hosts 0-2, a leading cluster-head on host 0 and a standby on host 1 sharing it, one
// cluster-worker on each of hosts 2 and 3; every process given the address others dial it at.
#include "tests/cluster/host_jobs.hpp"
#include "tests/cluster/host_rig.hpp"

#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/core/train/tiny_data.hpp"
#include "tests/support/etcd_cluster.hpp"

using cohort::test::host_rig;
using cohort::test::running_process;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// Four hosts: etcd members on 0, 1 and 2; the leading head on 0, a standby on 1 (both on port
// 7411 of their host); node n2 on host 2 (collectives on its --node-address) and node n3 on host
// 3 (collectives on --collective-interface eth0), one CPU each, so a 2-rank job spans them.
class cluster_across_hosts {
 public:
  static constexpr int port = 7411;

  cluster_across_hosts() : etcd_(cohort::test::etcd_member_hosts(rig_, 0, 3)) {
    location_ = etcd_.location("/across-hosts");
    heads_ =
        rig_.address(0) + ":" + std::to_string(port) + "," + rig_.address(1) + ":" + std::to_string(port);
    leader_ = start_head(0);
    leader_->wait_for_line("serving on", 60s);
    standby_ = start_head(1);
    standby_->wait_for_line("waiting as a standby", 60s);
    n2_ = start_node(2, "n2", {});
    n3_ = start_node(3, "n3", {"--collective-interface", host_rig::interface_name()});
    for (auto* node : {n2_.get(), n3_.get()})
      node->wait_for_line("joined the leader at " + rig_.address(0) + ":" + std::to_string(port), 60s);
  }

  // Everything inside the hosts ends at once (kill -9): no process waits on a head or etcd
  // member that went before it.
  ~cluster_across_hosts() { rig_.tear_down(); }

  const host_rig& rig() const { return rig_; }
  const cohort::test::temp_dir& dir() const { return dir_; }
  running_process& leader() { return *leader_; }
  running_process& node(int host) { return host == 2 ? *n2_ : *n3_; }

  // `submit ARGS...` run inside `host` with the cluster's heads and credentials.
  cohort::test::command_result submit(int host, const std::vector<std::string>& args,
                                      const std::string& heads = "") const {
    return cohort::test::submit_in_host(rig_, host, heads.empty() ? heads_ : heads, credentials(), args);
  }
  // Polls `submit status --json` (from host 3) until pred holds; throws with the last answer.
  json wait_for(const std::string& id, const std::function<bool(const json&)>& pred,
                std::chrono::seconds timeout) const {
    return cohort::test::wait_for_job_in_host(rig_, 3, heads_, credentials(), id, pred, timeout);
  }

 private:
  std::string credentials() const { return dir_.path("keys/cluster/credentials.json"); }
  std::unique_ptr<running_process> start_head(int host) {
    return cohort::test::start_head_in_host(rig_, host, location_, dir_.path("keys"), port);
  }
  std::unique_ptr<running_process> start_node(int host, const std::string& name,
                                              const std::vector<std::string>& extra) {
    std::vector<std::string> argv{cohort::test::program_path("cluster-worker"), "--address", heads_,
                                  "--store", location_, "--credentials", credentials(), "--name", name,
                                  "--node-address", rig_.address(host), "--num-cpus", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return rig_.start(host, argv);
  }

  // Declared first: the members below are made inside its hosts.
  host_rig rig_{4};
  cohort::test::temp_dir dir_{"cohort-hosts"};
  cohort::test::etcd_cluster etcd_;
  std::string location_, heads_;
  std::unique_ptr<running_process> leader_, standby_, n2_, n3_;
};

// The environment process `pid` started with.
std::map<std::string, std::string> start_environment(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ");
  std::map<std::string, std::string> out;
  for (std::string entry; std::getline(in, entry, '\0');) {
    const auto eq = entry.find('=');
    if (eq != std::string::npos) out[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return out;
}

// The cohort-worker processes (ranks) inside `host`.
std::vector<pid_t> ranks_in(const host_rig& rig, int host) {
  std::vector<pid_t> out;
  for (const auto pid : rig.processes(host)) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    if (std::getline(comm, name) && name == "cohort-worker") out.push_back(pid);
  }
  return out;
}

// The job across hosts (host_jobs.hpp), 4 steps, failing at its first failure, held before its
// step 2 until released.
std::string zero3_job(const std::string& data, const std::string& storage) {
  auto spec = cohort::test::spread_zero3_job("across", data, storage, 4);
  spec["run"]["failure"] = {{"max_failures", 0}};
  spec["run"]["hold_before_step"] = 2;
  return spec.dump();
}

}  // namespace

TEST_CASE("across four hosts, heads on two sharing a three-host etcd and nodes on the others run a "
          "ZeRO-3 job over Gloo with its ranks on different hosts to SUCCEEDED",
          "[hosts][cluster][etcd]") {
  COHORT_NEED_HOSTS();
  cluster_across_hosts c;
  // Each node says where its ranks run collectives: the node's address, or the interface given.
  CHECK_THAT(c.node(2).wait_for_line("offers", 10s),
             Catch::Contains("collectives on " + c.rig().address(2) + " (interface eth0)"));
  CHECK_THAT(c.node(3).wait_for_line("offers", 10s),
             Catch::Contains("collectives on interface eth0 (--collective-interface)"));

  const auto data = cohort::test::make_tiny_dataset(c.dir().path("data"));
  const auto job = c.dir().write("job.json", zero3_job(data, c.dir().path("runs")));
  const auto run = c.submit(2, {"run", job});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const auto id = run.out.substr(0, run.out.find('\n'));
  const auto held = c.wait_for(
      id, [](const json& s) { return s["state"] == "RUNNING" && s["held_before_step"] == 2; }, 240s);

  // Held with its group connected: the ranks got where to run collectives from their node (host
  // 2: NCCL given the interface that holds the node's address; host 3: both variables from
  // --collective-interface), and nothing in the nodes' hosts listens on any other address (the
  // trainer's rendezvous store binds its node's address; Gloo closes a rank's listeners once
  // connected, hosts_collectives_test checks them while they listen).
  for (const int host : {2, 3}) {
    INFO("host " << host);
    const auto ranks = ranks_in(c.rig(), host);
    REQUIRE(ranks.size() == 1);
    auto env = start_environment(ranks[0]);
    CHECK(env.count("NCCL_SOCKET_IFNAME") == 1);
    CHECK(env["NCCL_SOCKET_IFNAME"] == "=eth0");
    CHECK(env.count("GLOO_SOCKET_IFNAME") == (host == 3 ? 1u : 0u));
    const auto sockets = c.rig().listening(host);
    INFO("listening: " << json(sockets).dump());
    for (const auto& s : sockets) CHECK(s.rfind(c.rig().address(host) + ":", 0) == 0);
  }
  const int trainer_host = held["trainer_node"] == "n2" ? 2 : 3;
  CHECK_FALSE(c.rig().listening(trainer_host).empty());  // the rendezvous store, at least
  const auto released = c.submit(3, {"release", id});
  INFO(released.out << released.err);
  REQUIRE(released.exit_code == 0);
  const auto done = c.wait_for(
      id, [](const json& s) { return s["state"] == "SUCCEEDED" || s["state"] == "FAILED"; }, 240s);
  INFO(done.dump() << "\nleader:\n" << c.leader().output() << "\nn2:\n" << c.node(2).output() << "\nn3:\n"
                   << c.node(3).output());
  CHECK(done["state"] == "SUCCEEDED");
  CHECK(done["attempts"] == 1);
  REQUIRE(done["rank_nodes"].size() == 2);
  CHECK(done["rank_nodes"][0] != done["rank_nodes"][1]);  // one rank per host

  // The standby on host 1, asked alone, names the leader at the address it published (host 0's,
  // which host 3 dials): submit follows it there.
  const auto via_standby =
      c.submit(3, {"status", id, "--json"}, c.rig().address(1) + ":" + std::to_string(c.port));
  INFO(via_standby.err);
  REQUIRE(via_standby.exit_code == 0);
  CHECK(json::parse(via_standby.out)["state"] == "SUCCEEDED");
  const auto logs = c.submit(3, {"logs", id});
  REQUIRE(logs.exit_code == 0);
  CHECK_THAT(logs.out, Catch::Contains("node=n2") && Catch::Contains("node=n3"));
}

TEST_CASE("a cluster-worker left on the default --node-address 127.0.0.1 with its head on another host "
          "exits 2 naming the option, before it joins",
          "[hosts][cluster]") {
  COHORT_NEED_HOSTS();
  host_rig rig(2);
  const auto head = rig.address(0) + ":7411";
  const auto r = rig.run(1, {cohort::test::program_path("cluster-worker"), "--address", head, "--credentials",
                             "/nonexistent/credentials.json", "--name", "n1", "--num-cpus", "1"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--node-address 127.0.0.1 is reachable from this machine only, but the "
                                    "head at " + head + " is on another machine") &&
                        Catch::Contains("eth0 (10.213.0.2"));
  // Given its own address, the same node gets past the check (to the credentials file it lacks).
  const auto own = rig.run(1, {cohort::test::program_path("cluster-worker"), "--address", head,
                               "--credentials", "/nonexistent/credentials.json", "--name", "n1",
                               "--num-cpus", "1", "--node-address", rig.address(1)});
  INFO(own.out << own.err);
  CHECK_THAT(own.err, !Catch::Contains("--node-address"));
}

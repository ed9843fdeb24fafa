// The cluster store's contract (store_backend.hpp), run against both backends: the directory and
// a real 3-member etcd cluster on loopback. Plus what only etcd has: contention for its leader
// key, lease expiry, and etcd members (the etcd leader among them) killed during writes.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "core/store/cluster_store.hpp"
#include "core/store/etcd_client.hpp"
#include "core/store/etcd_store.hpp"
#include "core/store/store_error.hpp"
#include "tests/core/store/store_test_support.hpp"
#include "tests/support/etcd_cluster.hpp"
#include "tests/support/files.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/support/temp_dir.hpp"

namespace store = cohort::core::store;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// One etcd cluster for the contract tests of this binary, started on first use; each test
// gets a prefix of its own.
cohort::test::etcd_cluster& shared_etcd() {
  static cohort::test::etcd_cluster cluster(3);
  return cluster;
}

std::string fresh_prefix() {
  static std::atomic<int> n{0};
  return "/test-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

// Store objects of one store of `backend` ("directory" or "etcd").
struct store_place {
  std::string backend;
  cohort::test::temp_dir dir{"store"};
  std::string location;
  explicit store_place(std::string b) : backend(std::move(b)) {
    location = backend == "etcd" ? shared_etcd().location(fresh_prefix()) : dir.path().string();
  }
  std::shared_ptr<store::cluster_store> open(store::store_options options = {}) const {
    return store::open_cluster_store(location, options);
  }
};

}  // namespace

TEST_CASE("Every store backend gives increasing job ids and keeps specs and states",
          "[core][store][etcd]") {
  auto backend = GENERATE(as<std::string>{}, "directory", "etcd");
  INFO("backend " << backend);
  store_place place(backend);
  auto db = place.open();
  auto epoch = db->lease().acquire("head-a", "a:1", 10s).value().epoch;
  CHECK(epoch >= 1);
  auto first = db->create_job(epoch, cohort::test::store_spec_text);
  auto second = db->create_job(epoch, "{\"name\": \"b\"}");
  CHECK(first == "job-0001");
  CHECK(second == "job-0002");
  CHECK(cohort::test::store_error_kind_of([&] { db->create_job(epoch, "[1, 2]"); }) == store::store_error_kind::invalid);

  db->write_state(epoch, first, {{"status", "RUNNING"}, {"attempts", 1}});
  auto reopened = place.open();
  auto jobs = reopened->list_jobs();
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[0].id == first);
  CHECK(jobs[0].spec_json == cohort::test::store_spec_text);
  REQUIRE(jobs[0].state);
  CHECK((*jobs[0].state)["status"] == "RUNNING");
  CHECK((*jobs[0].state)["epoch"] == epoch);
  CHECK_FALSE(jobs[1].state);
  CHECK_FALSE(reopened->load_job("job-0099"));
  CHECK(cohort::test::store_error_kind_of([&] { db->write_state(epoch, "job-0099", {{"status", "x"}}); }) ==
        store::store_error_kind::not_found);
  // A second store object continues the counter.
  CHECK(reopened->create_job(epoch, cohort::test::store_spec_text) == "job-0003");
  // Opened again the way it was opened (as a second owner on another thread does), it is the
  // same store.
  store::cluster_store like(db->dir(), db->options(), db->clock());
  CHECK(like.location() == db->location());
  CHECK(like.list_jobs().size() == 3);
}

TEST_CASE("Every store backend hands out a reserved job id once and shows the job only with its spec",
          "[core][store][etcd]") {
  auto backend = GENERATE(as<std::string>{}, "directory", "etcd");
  INFO("backend " << backend);
  store_place place(backend);
  auto db = place.open();
  auto epoch = db->lease().acquire("head-a", "a:1", 10s).value().epoch;
  const auto reserved = db->reserve_job_id(epoch);
  CHECK(reserved == "job-0001");
  // Taken: neither a create nor another store object gets it again.
  CHECK(db->create_job(epoch, cohort::test::store_spec_text) == "job-0002");
  auto other = place.open();
  CHECK(other->reserve_job_id(epoch) == "job-0003");
  // Not a job until its spec is there.
  CHECK_FALSE(other->load_job(reserved));
  CHECK(other->list_jobs().size() == 1);
  CHECK(cohort::test::store_error_kind_of([&] { db->write_state(epoch, reserved, {{"status", "x"}}); }) ==
        store::store_error_kind::not_found);

  db->create_reserved_job(epoch, reserved, cohort::test::store_spec_text);
  auto job = other->load_job(reserved);
  REQUIRE(job);
  CHECK(job->spec_json == cohort::test::store_spec_text);
  db->write_state(epoch, reserved, {{"status", "RUNNING"}});
  CHECK(other->list_jobs().size() == 2);
  // One job per id; only reserved ids; only JSON objects.
  CHECK(cohort::test::store_error_kind_of([&] { db->create_reserved_job(epoch, reserved, "{\"name\": \"b\"}"); }) ==
        store::store_error_kind::invalid);
  CHECK(cohort::test::store_error_kind_of([&] { db->create_reserved_job(epoch, "job-0099", cohort::test::store_spec_text); }) ==
        store::store_error_kind::invalid);
  CHECK(cohort::test::store_error_kind_of([&] { db->create_reserved_job(epoch, "job-0003", "[1]"); }) ==
        store::store_error_kind::invalid);
  // A head that lost the lease can neither reserve nor fill a reserved id.
  db->lease().release(epoch);
  auto newer = other->lease().acquire("head-b", "b:1", 10s).value().epoch;
  CHECK(newer > epoch);
  CHECK(cohort::test::store_error_kind_of([&] { db->reserve_job_id(epoch); }) == store::store_error_kind::fenced);
  CHECK(cohort::test::store_error_kind_of([&] { db->create_reserved_job(epoch, "job-0003", cohort::test::store_spec_text); }) ==
        store::store_error_kind::fenced);
  other->create_reserved_job(newer, "job-0003", cohort::test::store_spec_text);
  CHECK(other->list_jobs().size() == 3);
}

TEST_CASE("Every store backend appends history and numbered log lines, across store objects",
          "[core][store][etcd]") {
  auto backend = GENERATE(as<std::string>{}, "directory", "etcd");
  INFO("backend " << backend);
  store_place place(backend);
  store::store_options options;
  options.log_line_cap_bytes = 8;
  auto db = place.open(options);
  auto epoch = db->lease().acquire("head-a", "a:1", 10s).value().epoch;
  auto id = db->create_job(epoch, cohort::test::store_spec_text);
  db->append_event(epoch, id, {{"state", "PENDING"}});
  db->append_event(epoch, id, {{"state", "RUNNING"}, {"ts", 7}});
  auto events = db->read_events(id);
  REQUIRE(events.size() == 2);
  CHECK(events[0]["state"] == "PENDING");
  CHECK(events[0]["epoch"] == epoch);
  CHECK(events[0]["ts"].is_number_integer());
  CHECK(events[1]["ts"] == 7);

  db->append_logs(epoch, id, {{{"line", "one"}}, {{"line", "twotwotwotwo"}}});
  auto restarted = place.open(options);
  restarted->append_logs(epoch, id, {{{"line", "three"}}});
  auto logs = restarted->read_logs(id);
  REQUIRE(logs.size() == 3);
  CHECK(logs[0]["seq"] == 1);
  CHECK(logs[1]["line"] == "twotwotw");
  CHECK(logs[1]["truncated"] == true);
  CHECK(logs[2]["seq"] == 3);
  auto after = restarted->read_logs(id, 2);
  REQUIRE(after.size() == 1);
  CHECK(after[0]["line"] == "three");
  CHECK(cohort::test::store_error_kind_of([&] { db->read_events("job-0042"); }) == store::store_error_kind::not_found);
}

TEST_CASE("Every store backend fences the writes of a head that lost the lease",
          "[core][store][etcd]") {
  auto backend = GENERATE(as<std::string>{}, "directory", "etcd");
  INFO("backend " << backend);
  store_place place(backend);
  auto a = place.open();
  auto b = place.open();
  // Epoch 0 is accepted while no head ever held the lease.
  auto early = a->create_job(0, cohort::test::store_spec_text);
  auto held = a->lease().acquire("head-a", "a:1", 10s);
  REQUIRE(held);
  CHECK_FALSE(b->lease().acquire("head-b", "b:1", 10s));
  CHECK(b->lease().current()->head_id == "head-a");
  CHECK(cohort::test::store_error_kind_of([&] { a->write_state(0, early, {{"status", "x"}}); }) ==
        store::store_error_kind::fenced);
  CHECK(cohort::test::store_error_kind_of([&] { a->write_state(held->epoch + 1000, early, {{"status", "x"}}); }) ==
        store::store_error_kind::invalid);

  REQUIRE(a->lease().release(held->epoch));
  auto taken = b->lease().acquire("head-b", "b:1", 10s);
  REQUIRE(taken);
  CHECK(taken->epoch > held->epoch);
  CHECK(b->lease().current_epoch() == taken->epoch);
  CHECK_FALSE(a->lease().renew(held->epoch, 10s));
  CHECK(cohort::test::store_error_kind_of([&] { a->write_state(held->epoch, early, {{"status", "stale"}}); }) ==
        store::store_error_kind::fenced);
  CHECK(cohort::test::store_error_kind_of([&] { a->create_job(held->epoch, cohort::test::store_spec_text); }) == store::store_error_kind::fenced);
  CHECK(cohort::test::store_error_kind_of([&] { a->append_logs(held->epoch, early, {{{"line", "x"}}}); }) ==
        store::store_error_kind::fenced);
  CHECK(cohort::test::store_error_kind_of([&] { a->write_node(held->epoch, "n1", {{"cpus", 1}}); }) ==
        store::store_error_kind::fenced);
  b->write_state(taken->epoch, early, {{"status", "RUNNING"}});
  CHECK((*a->load_job(early)->state)["status"] == "RUNNING");
  CHECK(a->list_jobs().size() == 1);
}

TEST_CASE("Every store backend keeps node records by name", "[core][store][etcd]") {
  auto backend = GENERATE(as<std::string>{}, "directory", "etcd");
  INFO("backend " << backend);
  store_place place(backend);
  auto db = place.open();
  auto epoch = db->lease().acquire("head-a", "a:1", 10s).value().epoch;
  db->write_node(epoch, "n2", {{"cpus", 2}});
  db->write_node(epoch, "n1", {{"cpus", 1}});
  auto nodes = db->list_nodes();
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0]["cpus"] == 1);
  CHECK(nodes[0]["epoch"] == epoch);
  db->remove_node(epoch, "n1");
  db->remove_node(epoch, "n1");  // forgetting twice is no error
  REQUIRE(db->list_nodes().size() == 1);
  CHECK(cohort::test::store_error_kind_of([&] { db->write_node(epoch, "../x", {{"cpus", 1}}); }) ==
        store::store_error_kind::invalid);
}

TEST_CASE("Every store backend gives store objects on several threads distinct job ids",
          "[core][store][etcd]") {
  auto backend = GENERATE(as<std::string>{}, "directory", "etcd");
  INFO("backend " << backend);
  store_place place(backend);
  std::vector<std::vector<std::string>> ids(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      auto mine = place.open();
      for (int i = 0; i < 5; ++i) ids[t].push_back(mine->create_job(0, cohort::test::store_spec_text));
    });
  for (auto& t : threads) t.join();
  std::set<std::string> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  CHECK(all.size() == 20);
  CHECK(place.open()->list_jobs().size() == 20);
}

namespace {

using cohort::test::scoped_env;

// What opening the store at `location` and listing its jobs is refused with (store_error
// invalid).
std::string refusal(const std::string& location) {
  try {
    store::open_cluster_store(location)->list_jobs();
  } catch (const store::store_error& e) {
    CHECK(e.kind() == store::store_error_kind::invalid);
    return e.what();
  }
  FAIL("no error for " << location);
  return "";
}

}  // namespace

TEST_CASE("An etcd store location with a bad port or no endpoint is refused naming it",
          "[core][store][etcd]") {
  CHECK_THAT(refusal("etcd://h1:99999"), Catch::Contains("port '99999'"));
  CHECK_THAT(refusal("etcd://"), Catch::Contains("endpoint"));
  CHECK_THAT(refusal("etcd://h1:2379,,h2:2379"), Catch::Contains("an endpoint is empty"));
  auto ok = store::parse_etcd_location("etcd://h1:1,h2/jobs/");
  REQUIRE(ok.endpoints.size() == 2);
  CHECK(ok.endpoints[1].port == 2379);
  CHECK(ok.prefix == "/jobs");
}

TEST_CASE("An etcd store keeps only the newest log lines and history of a job",
          "[core][store][etcd]") {
  store::store_options options;
  options.etcd_log_lines_kept = 5;
  options.etcd_events_kept = 3;
  auto db = store::open_cluster_store(shared_etcd().location(fresh_prefix()), options);
  auto id = db->create_job(0, cohort::test::store_spec_text);
  std::vector<json> batch;
  for (int i = 1; i <= 7; ++i) batch.push_back({{"line", "l" + std::to_string(i)}});
  db->append_logs(0, id, batch);
  db->append_logs(0, id, {{{"line", "l8"}}});
  auto logs = db->read_logs(id);
  REQUIRE(logs.size() == 5);
  CHECK(logs.front()["line"] == "l4");
  CHECK(logs.back()["seq"] == 8);
  for (int i = 0; i < 5; ++i) db->append_event(0, id, {{"n", i}});
  auto events = db->read_events(id);
  REQUIRE(events.size() == 3);
  CHECK(events.front()["n"] == 2);
}

TEST_CASE("Of store clients contending for the etcd leader key, exactly one wins",
          "[core][store][etcd]") {
  const auto location = shared_etcd().location(fresh_prefix());
  std::vector<std::optional<store::lease_record>> won(6);
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] {
      auto mine = store::open_cluster_store(location);
      while (!go) std::this_thread::yield();
      won[t] = mine->lease().acquire("head-" + std::to_string(t), "h:1", 10s);
    });
  go = true;
  for (auto& t : threads) t.join();
  int winners = 0;
  std::string winner;
  for (int t = 0; t < 6; ++t)
    if (won[t]) {
      ++winners;
      winner = won[t]->head_id;
    }
  CHECK(winners == 1);
  CHECK(store::open_cluster_store(location)->lease().current()->head_id == winner);
}

TEST_CASE("When an etcd leader's lease expires another head wins a higher epoch and fences it",
          "[core][store][etcd]") {
  const auto location = shared_etcd().location(fresh_prefix());
  auto a = store::open_cluster_store(location);
  auto b = store::open_cluster_store(location);
  auto held = a->lease().acquire("head-a", "a:1", 1s);
  REQUIRE(held);
  auto id = a->create_job(held->epoch, cohort::test::store_spec_text);
  REQUIRE(a->lease().renew(held->epoch, 1s));
  // head-a stops renewing (it hangs); head-b polls as a standby does, until etcd expires it.
  std::optional<store::lease_record> taken;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!taken && std::chrono::steady_clock::now() < deadline) {
    taken = b->lease().acquire("head-b", "b:1", 10s);
    if (!taken) std::this_thread::sleep_for(100ms);  // a standby's poll interval
  }
  REQUIRE(taken);
  CHECK(taken->epoch > held->epoch);
  CHECK_FALSE(a->lease().renew(held->epoch, 1s));
  CHECK(cohort::test::store_error_kind_of([&] { a->write_state(held->epoch, id, {{"status", "stale"}}); }) ==
        store::store_error_kind::fenced);
  b->write_state(taken->epoch, id, {{"status", "RUNNING"}});
  CHECK((*b->load_job(id)->state)["status"] == "RUNNING");
  CHECK(b->lease().current()->head_id == "head-b");
}

TEST_CASE("Killing an etcd member, or the etcd leader, during writes loses no acknowledged record",
          "[core][store][etcd]") {
  cohort::test::etcd_cluster cluster(3);
  const bool kill_leader = GENERATE(false, true);
  INFO((kill_leader ? "the etcd leader" : "a follower") << " is killed");
  int victim = cluster.leader();
  REQUIRE(victim >= 0);
  if (!kill_leader) victim = (victim + 1) % cluster.size();
  // The victim first in the endpoint list: the store must fail over to the next one.
  std::vector<int> order{victim};
  for (int i = 0; i < cluster.size(); ++i)
    if (i != victim) order.push_back(i);
  auto db = store::open_cluster_store(cluster.location("/kill", order));
  auto epoch = db->lease().acquire("head-a", "a:1", 10s).value().epoch;
  auto id = db->create_job(epoch, cohort::test::store_spec_text);
  std::vector<int> acked;
  for (int i = 0; i < 60; ++i) {
    if (i == 20) cluster.kill(victim);
    try {
      db->append_event(epoch, id, {{"n", i}});
      db->write_state(epoch, id, {{"n", i}});
      acked.push_back(i);
    } catch (const store::store_error& e) {
      WARN("write " << i << " not acknowledged: " << e.what());
    }
  }
  CHECK(acked.size() >= 50);
  auto reader = store::open_cluster_store(cluster.location("/kill", order));
  std::set<int> stored;
  for (const auto& e : reader->read_events(id)) stored.insert(e["n"].get<int>());
  for (int i : acked) CHECK(stored.count(i) == 1);
  CHECK((*reader->load_job(id)->state)["n"] == acked.back());
  CHECK(reader->lease().current()->epoch == epoch);
}

TEST_CASE("An etcd store none of whose endpoints answers fails with an io error naming each",
          "[core][store][etcd]") {
  // Ports 1 and 9 on loopback: nothing listens there (privileged, no such services in tests).
  store::etcd_store db(store::parse_etcd_location("etcd://127.0.0.1:1,127.0.0.1:9/x"), {},
                       store::system_clock_ms, 300ms);
  try {
    db.list_jobs();
    FAIL("no error");
  } catch (const store::store_error& e) {
    CHECK(e.kind() == store::store_error_kind::io);
    CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:1: ") && Catch::Contains("127.0.0.1:9: "));
  }
}

TEST_CASE("A standby watching the etcd leader key wakes when the leader gives the lease up",
          "[core][store][etcd]") {
  const auto location = shared_etcd().location(fresh_prefix());
  auto a = store::open_cluster_store(location);
  auto b = store::open_cluster_store(location);
  auto held = a->lease().acquire("head-a", "a:1", 10s);
  REQUIRE(held);
  std::atomic<bool> woke{false};
  std::chrono::steady_clock::duration waited{};
  std::thread standby([&] {
    const auto start = std::chrono::steady_clock::now();
    woke = b->lease().wait_for_change(60s);
    waited = std::chrono::steady_clock::now() - start;
  });
  // The standby's watch starts after the leader key's last change, so a release at any moment
  // from here on wakes it.
  REQUIRE(a->lease().release(held->epoch));
  standby.join();
  CHECK(woke);
  CHECK(waited < 30s);  // the release woke it, not the 60 s timeout
  auto taken = b->lease().acquire("head-b", "b:1", 10s);
  REQUIRE(taken);
  CHECK(taken->epoch > held->epoch);
}

TEST_CASE("A directory store cannot watch its lease: wait_for_change returns false at once",
          "[core][store]") {
  cohort::test::temp_dir dir("store");
  store::cluster_store db(dir.path());
  CHECK_FALSE(db.lease().wait_for_change(60s));
}


TEST_CASE("An etcd cluster with authentication serves the store to its user with the password from "
          "the environment, and refuses a wrong or missing one naming what to set",
          "[core][store][etcd]") {
  cohort::test::etcd_cluster etcd(1);
  const std::string endpoint = etcd.location("/").substr(std::string("etcd://").size());
  const std::string at = endpoint.substr(0, endpoint.find('/'));
  const std::string etcdctl = "ETCDCTL_API=3 etcdctl --endpoints=" + at + " ";
  REQUIRE(std::system((etcdctl + "user add root --new-user-password=s3cret >/dev/null").c_str()) == 0);
  REQUIRE(std::system((etcdctl + "auth enable >/dev/null 2>&1").c_str()) == 0);
  const std::string location = "etcd://root@" + at + "/authed";
  {
    scoped_env password(store::etcd_password_variable, "s3cret");
    auto db = store::open_cluster_store(location);
    const auto id = db->create_job(0, cohort::test::store_spec_text);
    CHECK(db->list_jobs().size() == 1);
    CHECK(store::open_cluster_store(location)->load_job(id).has_value());
  }
  {
    scoped_env password(store::etcd_password_variable, "wrong");
    CHECK_THAT(refusal(location), Catch::Contains("refused the login of user 'root'") &&
                                      Catch::Contains(store::etcd_password_variable));
  }
  {
    scoped_env password(store::etcd_password_variable, nullptr);
    CHECK_THAT(refusal(location), Catch::Contains("etcd user 'root' needs its password in COHORT_ETCD_PASSWORD"));
    CHECK_THAT(refusal("etcd://" + at + "/authed"), Catch::Contains("user name is empty"));
  }
  CHECK_THAT(refusal("etcd://root:s3cret@" + at), Catch::Contains("a password does not go in the location"));
}

TEST_CASE("An etcd cluster that serves TLS and demands client certificates serves the store over "
          "etcds:// to a client with the CA and a certificate, and no client without them",
          "[core][store][etcd]") {
  cohort::test::temp_dir pki("pki");
  const auto file = [&](const char* name) { return pki.path(name); };
  const std::string quiet = " >/dev/null 2>&1";
  const auto openssl = [&](const std::string& args) {
    INFO("openssl " << args);
    REQUIRE(std::system(("cd '" + pki.str() + "' && openssl " + args + quiet).c_str()) == 0);
  };
  openssl("req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=cohort-test-ca");
  openssl("req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1");
  cohort::test::write_file(file("san.ext"), "subjectAltName=IP:127.0.0.1\n");
  openssl("x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile san.ext");
  openssl("req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=cohort");
  openssl("x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2");

  scoped_env ca(store::etcd_ca_variable, file("ca.pem").c_str());
  scoped_env cert(store::etcd_cert_variable, file("client.pem").c_str());
  scoped_env key(store::etcd_key_variable, file("client.key").c_str());
  cohort::test::etcd_cluster etcd(1, {file("server.pem"), file("server.key"), file("ca.pem")});
  const auto location = etcd.location("/tls");
  REQUIRE(location.rfind("etcds://", 0) == 0);
  {
    auto db = store::open_cluster_store(location);
    db->create_job(0, cohort::test::store_spec_text);
    CHECK(store::open_cluster_store(location)->list_jobs().size() == 1);
  }
  const auto failure = [](const std::string& where) {
    try {
      store::open_cluster_store(where)->list_jobs();
    } catch (const store::store_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  {
    scoped_env no_cert(store::etcd_cert_variable, nullptr);
    CHECK_THAT(failure(location), Catch::Contains("a client certificate needs both"));
    scoped_env no_key(store::etcd_key_variable, nullptr);
    CHECK_THAT(failure(location), Catch::Contains("no etcd endpoint of " + location));  // etcd refuses the handshake
  }
  const std::string plain = "etcd://" + location.substr(std::string("etcds://").size());
  CHECK_THAT(failure(plain), Catch::Contains("no etcd endpoint of " + plain));
}

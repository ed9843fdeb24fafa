// A head's leadership (actors/leader_session.hpp): taking the lease or waiting for it as a
// standby, renewing and giving it back, on the directory and on a real 3-member etcd cluster; what
// a standby and a head stepping down say; and the leading term: how long a head may act on its
// lease, what an unanswered or refused renewal does, and that a term ends once.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "actors/leader_session.hpp"
#include "core/store/cluster_store.hpp"
#include "tests/support/etcd_cluster.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::actors;
using cohort::core::store::lease_record;
using namespace std::chrono_literals;

namespace {

const leader_session::clock::time_point t0{};

cohort::test::etcd_cluster& shared_etcd() {
  static cohort::test::etcd_cluster cluster(3);
  return cluster;
}

// A store of `backend` ("directory" or "etcd"), fresh for each test; each head opens its own
// object of it (a lease object serves one head).
struct store_place {
  cohort::test::temp_dir dir{"lease"};
  std::string location;
  explicit store_place(const std::string& backend) {
    static std::atomic<int> n{0};
    location = backend == "etcd" ? shared_etcd().location("/leader-session-" + std::to_string(::getpid()) +
                                                          "-" + std::to_string(n++))
                                 : dir.path().string();
  }
  std::shared_ptr<cohort::core::store::cluster_store> open() const {
    return cohort::core::store::open_cluster_store(location);
  }
};

// Head a leading (for 30 s) on a fresh store of `backend`, and head b's store object beside it.
struct a_leads {
  store_place place;
  std::shared_ptr<cohort::core::store::cluster_store> a_store, b_store;
  lease_record a;
  explicit a_leads(const std::string& backend) : place(backend), a_store(place.open()), b_store(place.open()) {
    const auto held = a_store->lease().acquire("head-a", "10.0.0.1:7411", 30s);
    REQUIRE(held);
    a = *held;
  }
};

// A standby role that records what it was told; each wait calls `on_wait` with its number (1, 2,
// ...), which may act (give the leader's lease back) and says whether to stop.
struct recorded_standby : standby_role {
  std::vector<std::string> calls;
  std::optional<lease_record> first_leader;
  std::function<bool(int)> on_wait;
  int waits = 0;
  void begin(const std::optional<lease_record>& leader) override {
    calls.push_back("begin");
    first_leader = leader;
  }
  void leader_is(const std::optional<lease_record>&) override { calls.push_back("leader_is"); }
  bool stop_within(std::chrono::milliseconds) override {
    calls.push_back("wait");
    return on_wait(++waits);
  }
  void end() override { calls.push_back("end"); }
};

}  // namespace

TEST_CASE("a head takes a free lease at once, without ever waiting as a standby", "[actors][etcd]") {
  auto backend = GENERATE(as<std::string>{}, "directory", "etcd");
  INFO("backend " << backend);
  store_place place(backend);
  auto store = place.open();
  recorded_standby standby;
  standby.on_wait = [](int) { return true; };
  const auto held = acquire_leadership(store->lease(), {"head-a", "10.0.0.1:7411", 3s}, standby);
  REQUIRE(held);
  CHECK(held->epoch >= 1);
  CHECK(held->address == "10.0.0.1:7411");
  CHECK(standby.calls.empty());
}

TEST_CASE(
    "a standby waits naming the leader; it takes the lease in a newer epoch as soon as the leader "
    "gives it back, after which the old leader's renewals write nothing, and told to stop first "
    "it ends without the lease",
    "[actors][etcd]") {
  auto backend = GENERATE(as<std::string>{}, "directory", "etcd");
  INFO("backend " << backend);
  a_leads heads(backend);
  lease_fence a_fence;
  recorded_standby standby;
  const lease_claim b_claim{"head-b", "10.0.0.2:7411", 4s};
  const std::vector<std::string> two_waits{"begin", "wait", "leader_is", "wait", "end"};
  SECTION("the leader gives the lease back while the standby waits") {
    standby.on_wait = [&](int n) {
      if (n == 2) CHECK(release_lease(heads.a_store->lease(), a_fence, heads.a.epoch));
      return false;
    };
    const auto b = acquire_leadership(heads.b_store->lease(), b_claim, standby);
    REQUIRE(b);
    CHECK(b->epoch > heads.a.epoch);
    CHECK(b->head_id == "head-b");
    CHECK(standby.calls == two_waits);
    REQUIRE(standby.first_leader);
    CHECK(standby.first_leader->head_id == "head-a");
    CHECK(standby.first_leader->address == "10.0.0.1:7411");
    // Given back through its fence, the old leader's keeper renews nothing, and says so without
    // an error; the lease stays the new leader's.
    const auto late = renew_lease(heads.a_store->lease(), &a_fence, heads.a.epoch, 30s, std::nullopt);
    CHECK_FALSE(late.renewed);
    CHECK(late.error.empty());
    REQUIRE(heads.b_store->lease().current());
    CHECK(heads.b_store->lease().current()->epoch == b->epoch);
    // Without the fence the store itself refuses the deposed epoch.
    CHECK_FALSE(renew_lease(heads.a_store->lease(), nullptr, heads.a.epoch, 30s, std::nullopt).renewed);
    CHECK(renew_lease(heads.b_store->lease(), nullptr, b->epoch, 30s, std::string("10.0.0.2:7412")).renewed);
    CHECK(heads.a_store->lease().current()->address == "10.0.0.2:7412");
  }
  SECTION("the standby is told to stop while the leader leads") {
    standby.on_wait = [](int n) { return n == 2; };
    CHECK_FALSE(acquire_leadership(heads.b_store->lease(), b_claim, standby));
    CHECK(standby.calls == two_waits);
    CHECK(renew_lease(heads.a_store->lease(), &a_fence, heads.a.epoch, 30s, std::nullopt).renewed);
    CHECK(heads.b_store->lease().current()->epoch == heads.a.epoch);
  }
}

TEST_CASE(
    "a head may act for half its lease after taking it, and until 0.9 of the ttl after the "
    "start of each renewal",
    "[actors]") {
  leader_session s(10s, t0);
  CHECK(s.known_good(t0 + 4999ms));
  CHECK_FALSE(s.known_good(t0 + 5s));
  CHECK(s.on_renewal(t0 + 3s, true, true, t0 + 4s) == leader_session::verdict::leads);
  CHECK(s.valid_until() == t0 + 12s);  // counted from the renewal's start, not its answer
  CHECK(s.known_good(t0 + 11s));
  // A late answer of an earlier renewal never shortens the term.
  CHECK(s.on_renewal(t0 + 1s, true, true, t0 + 11s) == leader_session::verdict::leads);
  CHECK(s.valid_until() == t0 + 12s);
}

TEST_CASE(
    "a renewal the store did not answer leaves the head leading while its lease lasts and cuts "
    "it off past it; one refused because another head claimed a newer epoch ends the term at "
    "once, however much lease seemed left",
    "[actors]") {
  leader_session unanswered(10s, t0);
  CHECK(unanswered.on_renewal(t0 + 1s, false, false, t0 + 4s) == leader_session::verdict::leads);
  CHECK(unanswered.valid_until() == t0 + 5s);
  CHECK(unanswered.on_renewal(t0 + 2s, false, false, t0 + 5s) == leader_session::verdict::cut_off);
  leader_session refused(10s, t0);
  CHECK(refused.on_renewal(t0 + 1s, true, false, t0 + 1s) == leader_session::verdict::superseded);
}

TEST_CASE("a term ends once, and an ended term is never known good", "[actors]") {
  leader_session s(10s, t0);
  CHECK_FALSE(s.ended());
  CHECK(s.end());
  CHECK_FALSE(s.end());
  CHECK(s.ended());
  CHECK_FALSE(s.known_good(t0));
}

TEST_CASE("a head stepping down names the head that leads now and where to connect", "[actors]") {
  cohort::core::store::lease_record newer{8, "hostb:42", "10.0.0.2:7411", 0};
  const auto taken = step_down_reason(7, "its lease expired", newer);
  CHECK_THAT(taken, Catch::StartsWith("this head (epoch 7) is stepping down: its lease expired"));
  CHECK_THAT(taken, Catch::Contains("lost the leadership to hostb:42 at 10.0.0.2:7411 (epoch 8)"));
  CHECK_THAT(taken, Catch::EndsWith("connect to 10.0.0.2:7411"));
  // Its own lease, or none: no one else leads yet, and it does not pretend otherwise.
  cohort::core::store::lease_record own{7, "hosta:1", "10.0.0.1:7411", 0};
  for (const auto& leader : {std::optional<cohort::core::store::lease_record>(own),
                             std::optional<cohort::core::store::lease_record>()}) {
    const auto alone = step_down_reason(7, "a store write was fenced", leader);
    CHECK_THAT(alone, Catch::Contains("no other head has published a lease yet"));
    CHECK_THAT(alone, !Catch::Contains("lost the leadership to"));
  }
}

TEST_CASE("a standby answers with the leader of a live lease, and with no address once it expired",
          "[actors]") {
  cohort::core::store::lease_record leader{3, "hosta:9", "10.0.0.1:7411", 5000};
  const auto live = standby_answer(leader, 4999);
  CHECK(live.leader == "10.0.0.1:7411");
  CHECK(live.leader_epoch == 3);
  CHECK_THAT(live.message, Catch::StartsWith("this head is a standby, not the leader; the leader is "
                                             "10.0.0.1:7411 (epoch 3, hosta:9)"));
  // Expired: the dead leader is not named as where to go, a standby is about to take over.
  const auto expired = standby_answer(leader, 5000);
  CHECK(expired.leader.empty());
  CHECK(expired.leader_epoch == 0);
  CHECK_THAT(expired.message, Catch::Contains("no head holds a live lease now") &&
                                  Catch::Contains("10.0.0.1:7411 epoch 3, let its lease expire") &&
                                  Catch::Contains("retry then"));
  const auto none = standby_answer(std::nullopt, 0);
  CHECK(none.leader.empty());
  CHECK_THAT(none.message, Catch::Contains("no head ever led on this store"));
}

// The head's store writer: its writes land in the order they were sent, a read follows the writes
// sent before it, and a write of a head whose epoch was overtaken is refused as fenced; a head
// accepts jobs under ids the writer took ahead, answering once their specs are stored; the lease
// keeper renews the lease and reports when it is lost.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "actors/head_actor.hpp"
#include "actors/store_writer.hpp"
#include "core/store/store_paths.hpp"
#include "net/json_inspector.hpp"
#include "tests/actors/job_specs.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort;
using namespace std::chrono_literals;

namespace {

struct writer_fixture {
  cohort::test::temp_dir dir{"store-writer"};
  std::shared_ptr<std::int64_t> now = std::make_shared<std::int64_t>(5'000'000);
  core::store::clock_ms clock = [p = now] { return *p; };
  std::shared_ptr<core::store::cluster_store> head_store =
      std::make_shared<core::store::cluster_store>(dir.path(), core::store::store_options{}, clock);
  std::int64_t epoch = head_store->lease().acquire("head-a", "a:1", 1000ms).value().epoch;
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::actor writer = sys.spawn<caf::detached>(actors::store_writer, head_store);

  ~writer_fixture() { caf::anon_send_exit(writer, caf::exit_reason::user_shutdown); }

  template <class Reply, class Request>
  Reply ask(const Request& req) {
    caf::scoped_actor self{sys};
    Reply out{};
    std::string failure;
    self->request(writer, caf::infinite, req)
        .receive([&](Reply& r) { out = std::move(r); }, [&](caf::error& e) { failure = sys.render(e); });
    if (!failure.empty()) FAIL(failure);
    return out;
  }
};

actors::log_line numbered(const std::string& job, std::uint64_t seq) {
  return actors::log_line{job, 0, "n1", 42, "line " + std::to_string(seq), 0, seq};
}

}  // namespace

TEST_CASE("the store writer writes in the order it was sent, and a read follows the writes before it",
          "[actors][store]") {
  writer_fixture f;
  const auto id = f.head_store->create_job(f.epoch, R"({"name": "j"})");
  // Sent one after the other without waiting: the read comes after every line.
  for (std::uint64_t seq = 1; seq <= 50; ++seq)
    caf::anon_send(f.writer, actors::store_log_lines{f.epoch, id, {numbered(id, seq)}});
  // The barrier is answered once they are all on disk: what the head acknowledges waits for it.
  CHECK(f.ask<actors::store_write_result>(actors::store_barrier{}).error.empty());
  CHECK(f.head_store->read_logs(id).size() == 50);
  const auto logs = f.ask<actors::job_logs>(actors::read_job_logs{id});
  REQUIRE(logs.lines.size() == 50);
  for (std::size_t i = 0; i < logs.lines.size(); ++i) CHECK(logs.lines[i].text == "line " + std::to_string(i + 1));

  actors::job_record r;
  r.id = id;
  r.name = "j";
  r.state = actors::job_state::running;
  r.reason = "running";
  r.attempts = 1;
  CHECK(f.ask<actors::store_write_result>(actors::store_job_state{f.epoch, r}).error.empty());
  r.state = actors::job_state::succeeded;
  r.reason = "done";
  CHECK(f.ask<actors::store_write_result>(actors::store_job_state{f.epoch, r}).error.empty());
  const auto stored = f.head_store->load_job(id);
  REQUIRE(stored);
  REQUIRE(stored->state);
  CHECK(net::from_json_view<actors::job_record>(*stored->state).state == actors::job_state::succeeded);
  const auto events = f.head_store->read_events(id);
  REQUIRE(events.size() == 2);
  CHECK(events[0]["state"] == "RUNNING");
  CHECK(events[1]["state"] == "SUCCEEDED");
}

TEST_CASE("the store writer refuses, as fenced, a write of a head whose epoch another head overtook",
          "[actors][store]") {
  writer_fixture f;
  const auto id = f.head_store->create_job(f.epoch, R"({"name": "j"})");
  *f.now += 5000;  // head-a's lease ran out; head-b takes the next epoch
  core::store::cluster_store standby(f.dir.path(), {}, f.clock);
  REQUIRE(standby.lease().acquire("head-b", "b:1", 1000ms));
  const auto refused =
      f.ask<actors::store_write_result>(actors::store_log_lines{f.epoch, id, {numbered(id, 1)}});
  CHECK(refused.fenced);
  CHECK_FALSE(refused.error.empty());
  actors::job_record r;
  r.id = id;
  CHECK(f.ask<actors::store_write_result>(actors::store_job_state{f.epoch, r}).fenced);
  CHECK(f.ask<actors::job_logs>(actors::read_job_logs{id}).lines.empty());
  CHECK(f.head_store->read_events(id).empty());
}

TEST_CASE("the store writer takes job ids ahead and stores a spec under one before the job's state",
          "[actors][store]") {
  writer_fixture f;
  const auto taken = f.ask<actors::store_reserved_id>(actors::store_reserve_job_id{f.epoch});
  REQUIRE(taken.result.error.empty());
  CHECK(taken.job_id == "job-0001");
  CHECK(f.head_store->list_jobs().empty());
  // Sent together, as the head does: the spec lands first, so the state has a job to go to.
  caf::anon_send(f.writer, actors::store_job_spec{f.epoch, taken.job_id, R"({"name": "j"})"});
  actors::job_record r;
  r.id = taken.job_id;
  r.state = actors::job_state::pending;
  CHECK(f.ask<actors::store_write_result>(actors::store_job_state{f.epoch, r}).error.empty());
  const auto stored = f.head_store->load_job(taken.job_id);
  REQUIRE(stored);
  CHECK(stored->spec_json == R"({"name": "j"})");
  CHECK(stored->state);
  // A spec for an id nobody took is refused, naming it.
  const auto refused = f.ask<actors::store_write_result>(actors::store_job_spec{f.epoch, "job-0042", "{}"});
  CHECK_THAT(refused.error, Catch::Contains("job-0042") && Catch::Contains("not reserved"));
  CHECK_FALSE(refused.fenced);
}

TEST_CASE("a head answers each submit once the job's spec is stored, and an id it took ahead is never "
          "given again after it stops",
          "[actors][store]") {
  cohort::test::temp_dir dir{"head-store"};
  auto store = std::make_shared<core::store::cluster_store>(dir.path());
  actors::head_options options;
  options.store = store;
  options.epoch = store->lease().acquire("head-a", "a:1", 10s).value().epoch;
  options.lease_ttl = 10s;
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto head = sys.spawn(actors::head_actor, options);
  caf::scoped_actor self{sys};
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    cohort::test::lr_job_options o;
    o.name = "job" + std::to_string(i);
    const auto spec = cohort::test::linear_regression_job(o);
    self->request(head, caf::infinite, actors::submit_job{spec})
        .receive([&](actors::job_accepted& a) { ids.push_back(a.job_id); },
                 [&](caf::error& e) { FAIL(sys.render(e)); });
    // Answered: the spec and the state are in the store already (no node: it waits PENDING).
    const auto stored = store->load_job(ids.back());
    REQUIRE(stored);
    CHECK(stored->spec_json == spec);
    REQUIRE(stored->state);
    CHECK(net::from_json_view<actors::job_record>(*stored->state).state == actors::job_state::pending);
  }
  // In submission order, each new.
  CHECK(ids == std::vector<std::string>{"job-0001", "job-0002", "job-0003"});
  self->monitor(head);
  caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
  self->receive([](caf::down_msg&) {});
  // The head had taken the next id before answering the last submit: it stays unused.
  CHECK(store->list_jobs().size() == 3);
  CHECK(store->create_job(options.epoch, R"({"name": "later"})") == "job-0005");
}

TEST_CASE("the lease keeper renews the head's lease and says so, and says when another head took it",
          "[actors][store]") {
  writer_fixture f;
  caf::scoped_actor head{f.sys};
  // A short ttl: a renewal every 100 ms of real time, on the fixture's clock (which stands still).
  auto keeper = f.sys.spawn<caf::detached>(actors::lease_keeper, f.head_store,
                                           caf::actor_cast<caf::actor>(head), f.epoch, 300ms, nullptr);
  actors::lease_renewal first;
  head->receive([&](actors::lease_renewal& r) { first = r; },
                caf::after(std::chrono::seconds(60)) >> [] { FAIL("no renewal within 60 s"); });
  CHECK(first.renewed);
  CHECK(first.error.empty());
  CHECK(f.head_store->lease().current()->expires_at_ms == *f.now + 300);
  // Another head, whose clock is 10 s ahead (past any expiry the keeper can write), takes the next
  // epoch: the next renewal says the lease is lost.
  const auto ahead = *f.now + 10'000;
  core::store::cluster_store standby(f.dir.path(), {}, [ahead] { return ahead; });
  REQUIRE(standby.lease().acquire("head-b", "b:1", 1000ms));
  bool lost = false;
  while (!lost) {
    head->receive(
        [&](actors::lease_renewal& r) {
          CHECK(r.error.empty());
          lost = !r.renewed;
        },
        caf::after(std::chrono::seconds(60)) >> [] { FAIL("no renewal within 60 s"); });
  }
  CHECK(standby.lease().current()->head_id == "head-b");
  caf::anon_send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("a lease given back under the keeper's fence is never renewed again", "[actors][store]") {
  writer_fixture f;
  caf::scoped_actor head{f.sys};
  auto fence = std::make_shared<actors::lease_fence>();
  auto keeper = f.sys.spawn<caf::detached>(actors::lease_keeper, f.head_store,
                                           caf::actor_cast<caf::actor>(head), f.epoch, 300ms, fence);
  head->receive([&](actors::lease_renewal& r) { CHECK(r.renewed); },
                caf::after(std::chrono::seconds(60)) >> [] { FAIL("no renewal within 60 s"); });
  {  // as cluster-head gives it back when it cannot serve
    std::lock_guard<std::mutex> fenced(fence->mutex);
    fence->released = true;
    REQUIRE(f.head_store->lease().release(f.epoch));
  }
  // Renewals that started before the release may still report; the first after it says not
  // renewed, and the record stays given back.
  bool refused = false;
  while (!refused) {
    head->receive([&](actors::lease_renewal& r) { refused = !r.renewed; },
                  caf::after(std::chrono::seconds(60)) >> [] { FAIL("no renewal within 60 s"); });
  }
  // One more tick, forced: still nothing written.
  caf::anon_send(keeper, actors::publish_address{"elsewhere:1"});
  head->receive([&](actors::lease_renewal& r) { CHECK_FALSE(r.renewed); },
                caf::after(std::chrono::seconds(60)) >> [] { FAIL("no renewal within 60 s"); });
  const auto record = f.head_store->lease().current();
  REQUIRE(record);
  CHECK(record->expired_at(*f.now));
  CHECK(record->address != "elsewhere:1");
  caf::anon_send_exit(keeper, caf::exit_reason::user_shutdown);
}

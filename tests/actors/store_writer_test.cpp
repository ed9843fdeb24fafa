// The head's store writer: its writes land in the order they were sent, a read follows the writes
// sent before it, and a write of a head whose epoch was overtaken is refused as fenced.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "actors/store_writer.hpp"
#include "core/store/store_paths.hpp"
#include "net/json_inspector.hpp"
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

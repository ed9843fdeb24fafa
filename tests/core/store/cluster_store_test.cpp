// The cluster store: job records (spec, state, history, logs), node records, job ids that never
// repeat, and fenced writes once another head holds the lease.
#include "core/store/cluster_store.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <thread>

#include "core/store/atomic_file.hpp"
#include "core/store/job_ids.hpp"
#include "core/store/store_error.hpp"
#include "core/store/store_paths.hpp"
#include "tests/core/store/store_test_support.hpp"
#include "tests/support/temp_dir.hpp"

namespace store = cohort::core::store;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// A store whose lease is held by "head-a" at epoch 1 (unless `lease` is false: epoch 0).
struct fixture {
  cohort::test::temp_dir dir{"store"};
  std::shared_ptr<std::int64_t> now = std::make_shared<std::int64_t>(5'000'000);
  store::clock_ms clock = [p = now] { return *p; };
  store::cluster_store db;
  std::int64_t epoch = 0;

  explicit fixture(store::store_options options = {}, bool lease = true)
      : db(dir.path(), options, clock) {
    if (lease) epoch = db.lease().acquire("head-a", "a:1", 1000ms).value().epoch;
  }
};

}  // namespace

TEST_CASE("Jobs get increasing ids, keep their spec verbatim and list in id order",
          "[core][store]") {
  fixture f;
  std::vector<std::string> ids;
  for (int i = 0; i < 11; ++i) ids.push_back(f.db.create_job(f.epoch, cohort::test::store_spec_text));
  CHECK(ids.front() == "job-0001");
  CHECK(ids.back() == "job-0011");
  auto jobs = f.db.list_jobs();
  REQUIRE(jobs.size() == 11);
  for (std::size_t i = 0; i < jobs.size(); ++i) CHECK(jobs[i].id == ids[i]);
  auto one = f.db.load_job("job-0003");
  REQUIRE(one);
  CHECK(one->spec_json == cohort::test::store_spec_text);
  CHECK_FALSE(one->state);
  CHECK_FALSE(f.db.load_job("job-0099"));
}

TEST_CASE("Job ids order by number past job-9999", "[core][store]") {
  CHECK(store::format_job_id(10000) == "job-10000");
  CHECK(store::job_id_less("job-9999", "job-10000"));
  CHECK_FALSE(store::job_id_less("job-10000", "job-9999"));
  CHECK(store::parse_job_id("job-0042") == 42);
  CHECK_FALSE(store::parse_job_id("job-4x"));
  CHECK_FALSE(store::parse_job_id("job-"));
}

TEST_CASE("A spec that is not a JSON object is refused", "[core][store]") {
  fixture f;
  CHECK(cohort::test::store_error_kind_of([&] { f.db.create_job(f.epoch, "[1, 2]"); }) == store::store_error_kind::invalid);
  CHECK(cohort::test::store_error_kind_of([&] { f.db.create_job(f.epoch, "{\"a\":"); }) == store::store_error_kind::invalid);
  CHECK(f.db.list_jobs().empty());
}

TEST_CASE("A job's state is stored with the writer's epoch and read back", "[core][store]") {
  fixture f;
  auto id = f.db.create_job(f.epoch, cohort::test::store_spec_text);
  f.db.write_state(f.epoch, id, json{{"state", "PENDING"}, {"attempts", 0}});
  f.db.write_state(f.epoch, id, json{{"state", "RUNNING"}, {"attempts", 1}});
  auto job = f.db.load_job(id);
  REQUIRE(job->state);
  CHECK((*job->state)["state"] == "RUNNING");
  CHECK((*job->state)["attempts"] == 1);
  CHECK((*job->state)["epoch"] == f.epoch);
  CHECK(cohort::test::store_error_kind_of([&] { f.db.write_state(f.epoch, id, json::array()); }) ==
        store::store_error_kind::invalid);
  CHECK(cohort::test::store_error_kind_of([&] { f.db.write_state(f.epoch, "job-0077", json::object()); }) ==
        store::store_error_kind::not_found);
  CHECK(cohort::test::store_error_kind_of([&] { f.db.write_state(f.epoch, "../escape", json::object()); }) ==
        store::store_error_kind::invalid);
}

TEST_CASE("A corrupt state file is refused with an error naming it, by load and by list",
          "[core][store]") {
  fixture f;
  auto id = f.db.create_job(f.epoch, cohort::test::store_spec_text);
  auto path = f.dir.path() / "jobs" / id / "state.json";
  std::ofstream(path) << "{\"state\": \"RUNN";
  for (auto read : {std::function<void()>([&] { f.db.load_job(id); }),
                    std::function<void()>([&] { f.db.list_jobs(); })}) {
    try {
      read();
      FAIL("corrupt state accepted");
    } catch (const store::store_error& e) {
      CHECK(e.kind() == store::store_error_kind::corrupt);
      CHECK_THAT(e.what(), Catch::Contains(path.string()));
    }
  }
}

TEST_CASE("A job's history is appended with time and epoch and survives a torn last line",
          "[core][store]") {
  fixture f;
  auto id = f.db.create_job(f.epoch, cohort::test::store_spec_text);
  f.db.append_event(f.epoch, id, json{{"state", "PENDING"}});
  *f.now += 10;
  f.db.append_event(f.epoch, id, json{{"state", "RUNNING"}, {"attempt", 1}});
  std::ofstream(f.dir.path() / "jobs" / id / "events.jsonl", std::ios::app) << "{\"state\": \"SUCC";
  auto events = f.db.read_events(id);
  REQUIRE(events.size() == 2);
  CHECK(events[0]["state"] == "PENDING");
  CHECK(events[0]["ts"] == 5'000'000);
  CHECK(events[1]["ts"] == 5'000'010);
  CHECK(events[1]["epoch"] == f.epoch);
  f.db.append_event(f.epoch, id, json{{"state", "SUCCEEDED"}, {"ts", 42}});
  events = f.db.read_events(id);
  REQUIRE(events.size() == 3);
  CHECK(events[2]["state"] == "SUCCEEDED");
  CHECK(events[2]["ts"] == 42);
}

TEST_CASE("Log lines get sequence numbers that continue across store objects", "[core][store]") {
  fixture f;
  auto id = f.db.create_job(f.epoch, cohort::test::store_spec_text);
  f.db.append_logs(f.epoch, id,
                   {json{{"rank", 0}, {"line", "a"}}, json{{"rank", 1}, {"line", "b"}}});
  store::cluster_store restarted(f.dir.path(), {}, f.clock);
  restarted.append_logs(f.epoch, id, {json{{"rank", 0}, {"line", "c"}}});
  auto logs = restarted.read_logs(id);
  REQUIRE(logs.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(logs[i]["seq"] == i + 1);
  CHECK(logs[2]["line"] == "c");
  auto tail = restarted.read_logs(id, 2);
  REQUIRE(tail.size() == 1);
  CHECK(tail[0]["line"] == "c");
}

TEST_CASE("Long log lines are cut and a full log file rotates, keeping the newest lines",
          "[core][store]") {
  store::store_options options;
  options.log_line_cap_bytes = 10;
  options.log_file_cap_bytes = 600;
  fixture f(options);
  auto id = f.db.create_job(f.epoch, cohort::test::store_spec_text);
  f.db.append_logs(f.epoch, id, {json{{"line", "0123456789abcdef"}}});
  f.db.append_logs(f.epoch, id, {json{{"line", "h\xC3\xA9h\xC3\xA9h\xC3\xA9h\xC3\xA9"}}});
  auto first = f.db.read_logs(id);
  REQUIRE(first.size() == 2);
  CHECK(first[0]["line"] == "0123456789");
  CHECK(first[0]["truncated"] == true);
  CHECK(first[1]["line"] == "h\xC3\xA9h\xC3\xA9h\xC3\xA9h");  // not split inside a character
  for (int i = 0; i < 100; ++i) f.db.append_logs(f.epoch, id, {json{{"line", std::to_string(i)}}});
  auto job_dir = f.dir.path() / "jobs" / id;
  CHECK(std::filesystem::exists(job_dir / "logs.1.jsonl"));
  CHECK(std::filesystem::file_size(job_dir / "logs.1.jsonl") < 2 * options.log_file_cap_bytes);
  auto logs = f.db.read_logs(id);
  REQUIRE_FALSE(logs.empty());
  CHECK(logs.size() < 102);
  CHECK(logs.back()["seq"] == 102);
  CHECK(logs.back()["line"] == "99");
  for (std::size_t i = 1; i < logs.size(); ++i)
    CHECK(logs[i]["seq"].get<std::int64_t>() == logs[i - 1]["seq"].get<std::int64_t>() + 1);
}

TEST_CASE("Writes of a head that lost the lease are refused as fenced", "[core][store]") {
  fixture f;
  auto id = f.db.create_job(f.epoch, cohort::test::store_spec_text);
  f.db.write_state(f.epoch, id, json{{"state", "RUNNING"}});
  *f.now += 5000;  // head-a's lease ran out
  store::cluster_store standby(f.dir.path(), {}, f.clock);
  auto taken = standby.lease().acquire("head-b", "b:1", 1000ms);
  REQUIRE(taken);
  REQUIRE(taken->epoch == f.epoch + 1);
  using store::store_error_kind;
  CHECK(cohort::test::store_error_kind_of([&] {
          f.db.write_state(f.epoch, id, json{{"state", "FAILED"}});
        }) == store_error_kind::fenced);
  CHECK(cohort::test::store_error_kind_of([&] {
          f.db.append_event(f.epoch, id, json{{"state", "FAILED"}});
        }) == store_error_kind::fenced);
  CHECK(cohort::test::store_error_kind_of([&] {
          f.db.append_logs(f.epoch, id, {json{{"line", "x"}}});
        }) == store_error_kind::fenced);
  CHECK(cohort::test::store_error_kind_of([&] { f.db.create_job(f.epoch, cohort::test::store_spec_text); }) == store_error_kind::fenced);
  CHECK(cohort::test::store_error_kind_of([&] { f.db.write_node(f.epoch, "n1", json::object()); }) ==
        store_error_kind::fenced);
  CHECK(cohort::test::store_error_kind_of([&] { f.db.remove_node(f.epoch, "n1"); }) == store_error_kind::fenced);
  try {
    f.db.write_state(f.epoch, id, json::object());
  } catch (const store::store_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("head-b") && Catch::Contains("epoch 2"));
  }
  CHECK((*f.db.load_job(id)->state)["state"] == "RUNNING");
  CHECK(f.db.list_jobs().size() == 1);
  standby.write_state(taken->epoch, id, json{{"state", "RESTARTING"}});
  CHECK((*standby.load_job(id)->state)["epoch"] == taken->epoch);
  CHECK(cohort::test::store_error_kind_of([&] { standby.write_state(taken->epoch + 1, id, json::object()); }) ==
        store_error_kind::invalid);
}

TEST_CASE("Without any lease, writes at epoch 0 are accepted", "[core][store]") {
  fixture f({}, false);
  auto id = f.db.create_job(0, cohort::test::store_spec_text);
  f.db.write_state(0, id, json{{"state", "PENDING"}});
  CHECK((*f.db.load_job(id)->state)["epoch"] == 0);
}

TEST_CASE("Job ids never repeat across store objects, deleted jobs and half-created jobs",
          "[core][store]") {
  fixture f;
  f.db.create_job(f.epoch, cohort::test::store_spec_text);
  f.db.create_job(f.epoch, cohort::test::store_spec_text);
  store::cluster_store restarted(f.dir.path(), {}, f.clock);
  CHECK(restarted.create_job(f.epoch, cohort::test::store_spec_text) == "job-0003");
  std::filesystem::remove_all(f.dir.path() / "jobs" / "job-0003");
  CHECK(restarted.create_job(f.epoch, cohort::test::store_spec_text) == "job-0004");
  std::filesystem::remove_all(f.dir.path() / "jobs" / "job-0004");
  store::cluster_store again(f.dir.path(), {}, f.clock);
  CHECK(again.create_job(f.epoch, cohort::test::store_spec_text) == "job-0005");
  std::filesystem::create_directory(f.dir.path() / "jobs" / "job-0006");  // crash inside create
  CHECK(again.list_jobs().size() == 3);
  CHECK(again.create_job(f.epoch, cohort::test::store_spec_text) == "job-0007");
  std::filesystem::remove(store::next_job_id_path(f.dir.path()));
  CHECK(again.create_job(f.epoch, cohort::test::store_spec_text) == "job-0008");
}

TEST_CASE("A corrupt job counter is refused with an error naming it", "[core][store]") {
  fixture f;
  std::ofstream(store::next_job_id_path(f.dir.path())) << "\"seven\"";
  try {
    f.db.create_job(f.epoch, cohort::test::store_spec_text);
    FAIL("corrupt counter accepted");
  } catch (const store::store_error& e) {
    CHECK(e.kind() == store::store_error_kind::corrupt);
    CHECK_THAT(e.what(), Catch::Contains("next_job_id"));
  }
}

TEST_CASE("Store objects creating jobs from several threads get distinct ids", "[core][store]") {
  fixture f;
  const int threads = 4, per_thread = 15;
  std::vector<std::vector<std::string>> ids(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      store::cluster_store mine(f.dir.path(), {}, f.clock);
      for (int i = 0; i < per_thread; ++i) ids[t].push_back(mine.create_job(f.epoch, cohort::test::store_spec_text));
    });
  for (auto& th : pool) th.join();
  std::set<std::string> all;
  for (const auto& list : ids) all.insert(list.begin(), list.end());
  CHECK(all.size() == threads * per_thread);
  CHECK(f.db.list_jobs().size() == threads * per_thread);
  CHECK(*all.rbegin() == store::format_job_id(threads * per_thread));
}

TEST_CASE("Node records are written, listed by name and removed", "[core][store]") {
  fixture f;
  f.db.write_node(f.epoch, "n2", json{{"resources", {{"CPU", 8}}}});
  f.db.write_node(f.epoch, "n1", json{{"resources", {{"CPU", 4}}}});
  std::ofstream(store::temp_path_for(f.dir.path() / "nodes" / "n3.json")) << "{";
  auto nodes = f.db.list_nodes();
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0]["resources"]["CPU"] == 4);
  CHECK(nodes[1]["epoch"] == f.epoch);
  CHECK(nodes[1]["updated_at"] == *f.now);
  f.db.remove_node(f.epoch, "n1");
  f.db.remove_node(f.epoch, "n1");
  CHECK(f.db.list_nodes().size() == 1);
  CHECK(cohort::test::store_error_kind_of([&] { f.db.write_node(f.epoch, "../n", json::object()); }) ==
        store::store_error_kind::invalid);
  CHECK(cohort::test::store_error_kind_of([&] { f.db.write_node(f.epoch, "n", json::array()); }) ==
        store::store_error_kind::invalid);
}

TEST_CASE("The credentials file lives under cluster/ in the store", "[core][store]") {
  CHECK(store::credentials_path("/srv/store") == "/srv/store/cluster/credentials.json");
}

TEST_CASE("Store files are their owner's alone: 0600 files in 0700 directories", "[core][store]") {
  fixture f;
  const auto id = f.db.create_job(f.epoch, cohort::test::store_spec_text);
  f.db.write_state(f.epoch, id, {{"state", "RUNNING"}});
  f.db.append_event(f.epoch, id, {{"what", "placed"}});
  f.db.append_logs(f.epoch, id, {json{{"text", "a line"}}});
  const auto mode = [](const std::filesystem::path& p) {
    return std::filesystem::status(p).permissions() & std::filesystem::perms::all;
  };
  using std::filesystem::perms;
  const auto owner_rw = perms::owner_read | perms::owner_write;
  std::size_t files = 0, dirs = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(f.dir.path())) {
    INFO(e.path());
    if (e.is_directory()) {
      CHECK(mode(e.path()) == perms::owner_all);
      ++dirs;
    } else {
      CHECK(mode(e.path()) == owner_rw);
      ++files;
    }
  }
  CHECK(files >= 4);  // lease, spec, state, events, logs, ...
  CHECK(dirs >= 2);
}

// The JSON views of the protocol's records (net/json_inspector.hpp over messages.hpp's inspect
// lists): round trips, the keys the store, `--json` and the worker's setup have always used, and
// errors that name the field.
#include <catch2/catch.hpp>

#include <cmath>

#include "actors/messages.hpp"
#include "actors/worker_process_link.hpp"
#include "net/json_inspector.hpp"
#include "net/msgpack_reader.hpp"
#include "net/msgpack_writer.hpp"

using namespace cohort;
using actors::failure_cause;
using actors::job_record;
using actors::job_state;
using actors::node_info;
using actors::worker_setup;
using nlohmann::json;

namespace {

failure_cause hung_cause() {
  failure_cause f;
  f.attempt = 2;
  f.rank = 1;
  f.node = "n2";
  f.reason = "rank 1 hung";
  f.kind = actors::failure_kind::bad_input;
  f.hung = true;
  f.pid = 4242;
  f.last_step = 17;
  f.report = "line one\nline two";
  return f;
}

job_record full_record() {
  job_record r;
  r.id = "job-0007";
  r.name = "llama";
  r.state = job_state::restarting;
  r.reason = "restarting after a crash";
  r.attempts = 3;
  r.failures = {hung_cause(), failure_cause{0, -1, "n1", "trainer died"}};
  r.trainer_node = "n1";
  r.rank_nodes = {"n1", "n2"};
  r.step = 40;
  r.total_steps = 100;
  r.loss = 2.5;
  r.checkpoint_step = 30;
  r.spec_json = R"({"name": "llama"})";
  r.held_before_step = 41;
  r.rank_gpus = {{0, 1}, {}};
  r.preemptions = 2;
  r.phase = "preempting";
  r.phase_checkpoint_before = 39;
  r.phase_deadline_ms = 1'764'000'000'000;
  r.phase_node = "n2";
  r.phase_why = "node n2 got SIGTERM";
  r.phase_to = 0;
  r.resizes = 1;
  return r;
}

// Through text, as the store and `--json` carry it.
template <class T>
T through_text(const T& x) {
  return net::from_json_text<T>(net::to_json_view(x).dump(), "test");
}

}  // namespace

TEST_CASE("every record of a JSON view survives a round trip through JSON text", "[actors][json]") {
  SECTION("job_record, with its failures, but without the spec, which is wire only") {
    const auto r = full_record();
    const auto back = through_text(r);
    CHECK(back.id == r.id);
    CHECK(back.name == r.name);
    CHECK(back.state == r.state);
    CHECK(back.reason == r.reason);
    CHECK(back.attempts == r.attempts);
    REQUIRE(back.failures.size() == 2);
    CHECK(back.failures[0].attempt == 2);
    CHECK(back.failures[0].rank == 1);
    CHECK(back.failures[0].node == "n2");
    CHECK(back.failures[0].kind == actors::failure_kind::bad_input);
    CHECK(back.failures[0].hung);
    CHECK(back.failures[0].pid == 4242);
    CHECK(back.failures[0].last_step == 17);
    CHECK(back.failures[0].report == "line one\nline two");
    CHECK(back.failures[1].rank == -1);
    CHECK(back.trainer_node == "n1");
    CHECK(back.rank_nodes == r.rank_nodes);
    CHECK(back.step == 40);
    CHECK(back.total_steps == 100);
    CHECK(back.loss == 2.5);
    CHECK(back.checkpoint_step == 30);
    CHECK(back.held_before_step == 41);
    CHECK(back.rank_gpus == r.rank_gpus);
    CHECK(back.preemptions == 2);
    CHECK(back.spec_json.empty());
    CHECK_FALSE(net::to_json_view(r).contains("spec_json"));
  }
  SECTION("node_info") {
    node_info n{"g1", {{"CPU", 8}, {"GPU", 2}, {"accelerator_type:H100", 1}}, "10.0.0.2",
                80LL << 30, "NVIDIA H100", {"GPU-a", "GPU-b"}, "", "drained"};
    const auto back = through_text(n);
    CHECK(back.name == "g1");
    CHECK(back.resources == n.resources);
    CHECK(back.address == "10.0.0.2");
    CHECK(back.gpu_memory_bytes == (80LL << 30));
    CHECK(back.accelerator_type == "NVIDIA H100");
    CHECK(back.gpu_ids == n.gpu_ids);
    CHECK(back.drain_state == "drained");
  }
  SECTION("worker_setup, through the worker link's own functions") {
    worker_setup s{"job-1", config::parse_job_spec(R"({"name": "a", "workload": "linear_regression"})"),
                   3, 4, 1, "n2", "127.0.0.1:5000", "10.0.0.3", {2, 3}, std::string(64, 'f')};
    const auto back = actors::worker_setup_from_json(actors::worker_setup_to_json(s));
    CHECK(back.job_id == "job-1");
    CHECK(config::to_json_text(back.spec) == config::to_json_text(s.spec));
    CHECK(back.rank == 3);
    CHECK(back.world_size == 4);
    CHECK(back.attempt == 1);
    CHECK(back.node == "n2");
    CHECK(back.store_address == "127.0.0.1:5000");
    CHECK(back.node_address == "10.0.0.3");
    CHECK(back.gpus == s.gpus);
    CHECK(back.store_secret == s.store_secret);
  }
  SECTION("log_line, as a line of the store's logs (which adds keys of its own)") {
    actors::log_line l{"job-1", 1, "n2", 77, "step 3 loss 2.0", 4, 9, 6};
    auto j = net::to_json_view(l);
    CHECK(j["line"] == "step 3 loss 2.0");
    CHECK(j["attempt_seq"] == 9);
    CHECK_FALSE(j.contains("job_id"));
    j["seq"] = 120;
    j["ts"] = 1700000000000LL;
    const auto back = net::from_json_view<actors::log_line>(j);
    CHECK(back.rank == 1);
    CHECK(back.node == "n2");
    CHECK(back.pid == 77);
    CHECK(back.text == "step 3 loss 2.0");
    CHECK(back.attempt == 4);
    CHECK(back.seq == 9);
    CHECK(back.kept_from == 6);
    const auto older = net::from_json_view<actors::log_line>(json{{"line", "unnumbered"}});
    CHECK(older.text == "unnumbered");
    CHECK(older.attempt == -1);
    CHECK(older.seq == 0);
    CHECK(older.kept_from == 0);
  }
  SECTION("a NaN loss is written as null and read back as NaN") {
    auto r = full_record();
    r.loss = std::nan("");
    const auto text = net::to_json_view(r).dump();
    CHECK(json::parse(text)["loss"].is_null());
    CHECK(std::isnan(net::from_json_text<job_record>(text, "test").loss));
  }
}

TEST_CASE("a job record's JSON view keeps the keys and texts that status --json and the store have "
          "always used",
          "[actors][json]") {
  const auto j = net::to_json_view(full_record());
  for (const char* key : {"id", "name", "state", "reason", "attempts", "failures", "trainer_node",
                          "rank_nodes", "step", "total_steps", "loss", "checkpoint_step",
                          "held_before_step", "rank_gpus", "preemptions", "eval_step", "eval_loss",
                          "eval_perplexity"})
    CHECK(j.contains(key));
  CHECK(j["state"] == "RESTARTING");
  CHECK(j["failures"][0]["kind"] == "bad_input");
  CHECK(j["failures"][1]["kind"] == "retryable");
  CHECK(j["rank_gpus"] == json::array({json::array({0, 1}), json::array()}));
}

TEST_CASE("a job record written by an earlier head, without the fields added since, reads with "
          "their defaults",
          "[actors][json]") {
  const auto old = json::parse(R"({"id": "job-0001", "name": "old", "state": "RUNNING", "reason": "r",
      "attempts": 1, "trainer_node": "n1", "rank_nodes": ["n1"], "step": 3, "total_steps": 9,
      "failures": [{"attempt": 0, "rank": 0, "node": "n1", "reason": "crash"}]})");
  const auto r = net::from_json_view<job_record>(old);
  CHECK(r.state == job_state::running);
  CHECK(r.loss == 0);
  CHECK(r.preemptions == 0);
  CHECK(r.eval_step == 0);
  CHECK(r.rank_gpus.empty());
  CHECK(r.phase.empty());  // no preemption or resize in progress
  CHECK(r.resizes == 0);
  REQUIRE(r.failures.size() == 1);
  CHECK(r.failures[0].kind == actors::failure_kind::retryable);
  CHECK_FALSE(r.failures[0].hung);
}

TEST_CASE("JSON that does not fit a record is refused naming the field and what it allows",
          "[actors][json]") {
  auto j = net::to_json_view(full_record());
  const auto refused = [](const json& bad) {
    try {
      (void)net::from_json_view<job_record>(bad);
    } catch (const net::json_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  SECTION("a missing field") {
    j.erase("attempts");
    CHECK(refused(j) == "job_record.attempts: missing");
  }
  SECTION("a missing field of a nested record") {
    j["failures"][1].erase("node");
    CHECK(refused(j) == "job_record.failures[1].node: missing");
  }
  SECTION("an ill-typed field") {
    j["attempts"] = "three";
    CHECK(refused(j) == "job_record.attempts: expected an integer in [-2147483648, 2147483647], got \"three\"");
  }
  SECTION("an integer out of range, and a fraction where an integer belongs") {
    j["failures"][0]["rank"] = 4294967296LL;
    CHECK_THAT(refused(j), Catch::StartsWith("job_record.failures[0].rank: expected an integer in"));
    j = net::to_json_view(full_record());
    j["step"] = 2.5;
    CHECK(refused(j) == "job_record.step: expected an integer in [-9223372036854775808, "
                        "9223372036854775807], got 2.5");
  }
  SECTION("an unknown state names the allowed ones") {
    j["state"] = "DONE";
    CHECK(refused(j) == "job_record.state: expected one of PENDING, RUNNING, RESTARTING, SUCCEEDED, "
                        "FAILED, STOPPED, got \"DONE\"");
  }
  SECTION("an element of a nested array") {
    j["rank_gpus"][0][1] = "x";
    CHECK_THAT(refused(j), Catch::StartsWith("job_record.rank_gpus[0][1]: expected an integer"));
  }
  SECTION("not an object") {
    CHECK(refused(json::array()) == "job_record: expected an object, got []");
  }
  SECTION("the worker setup names its field too") {
    CHECK_THROWS_WITH(actors::worker_setup_from_json(R"({"job_id": "j"})"),
                      "worker_setup.spec: missing");
  }
}

TEST_CASE("a wire frame whose named field does not fit is refused naming the field", "[actors][json]") {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> packer{buf};
  net::msgpack_writer writer{packer};
  writer.apply(full_record());
  auto handle = msgpack::unpack(buf.data(), buf.size());
  msgpack::object body = handle.get();
  REQUIRE(body.type == msgpack::type::ARRAY);
  body.via.array.ptr[4] = msgpack::object(std::string("three"), *handle.zone());  // attempts
  net::field_path root{};
  job_record r;
  CHECK_THROWS_WITH(net::msgpack_reader::read(body, r, root),
                    Catch::StartsWith("job_record.attempts: expected an integer in [-2147483648, 2147483647]"));
}

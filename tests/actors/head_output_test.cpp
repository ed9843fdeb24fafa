// The head actor's side of the output protocol (attempt_state.hpp, log_sequence.hpp), driven as a
// trainer drives it: numbered lines that arrive out of order, each acknowledged only through the
// first gap, stored once, in memory and in a directory store alike.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <memory>
#include <string>
#include <vector>

#include "actors/head_actor.hpp"
#include "core/store/cluster_store.hpp"
#include "tests/actors/job_specs.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

// A head of `options` with one job submitted (no node: it stays PENDING), and a scoped actor
// that speaks to it as the job's trainer.
class head_with_job {
 public:
  explicit head_with_job(const head_options& options) : head_(sys_.spawn(head_actor, options)) {
    trainer_->request(head_, caf::infinite, submit_job{test::linear_regression_job({})})
        .receive([&](job_accepted& a) { job_id_ = a.job_id; }, [&](caf::error& e) { FAIL(sys_.render(e)); });
  }
  ~head_with_job() { caf::anon_send_exit(head_, caf::exit_reason::user_shutdown); }

  // Sends line `seq` of attempt 0 (its trainer keeping lines from `kept_from` on): the number the
  // head acknowledges.
  std::uint64_t send(std::uint64_t seq, std::uint64_t kept_from = 1) {
    log_line line{job_id_, 0, "n1", 42, "line " + std::to_string(seq)};
    line.attempt = 0;
    line.seq = seq;
    line.kept_from = kept_from;
    trainer_->send(head_, line);
    std::uint64_t acked = 0;
    trainer_->receive(
        [&](const log_ack& ack) {
          CHECK(ack.job_id == job_id_);
          CHECK(ack.attempt == 0);
          acked = ack.seq;
        },
        caf::after(60s) >> [] { FAIL("no log_ack within 60 s"); });
    return acked;
  }
  // The job's output as `submit logs` shows it, a text a line.
  std::vector<std::string> logs() {
    std::vector<std::string> texts;
    trainer_->request(head_, caf::infinite, logs_query{job_id_})
        .receive(
            [&](job_logs& logs) {
              for (const auto& l : logs.lines) texts.push_back(l.text);
            },
            [&](caf::error& e) { FAIL(sys_.render(e)); });
    return texts;
  }

 private:
  caf::actor_system_config cfg_;
  caf::actor_system sys_{cfg_};
  caf::actor head_;
  caf::scoped_actor trainer_{sys_};
  std::string job_id_;
};

}  // namespace

TEST_CASE(
    "a head stores a trainer's line sent again past a later one that got through first, "
    "acknowledges only through the first gap, and waits for no line the trainer dropped",
    "[actors][store]") {
  const bool with_store = GENERATE(false, true);
  INFO((with_store ? "in a directory store" : "in memory"));
  test::temp_dir dir{"head-output"};
  head_options options;
  if (with_store) {
    options.store = std::make_shared<core::store::cluster_store>(dir.path());
    options.epoch = options.store->lease().acquire("head-a", "a:1", 60s).value().epoch;
    options.lease_ttl = 60s;
  }
  head_with_job h(options);
  // Lines 1 and 2 were lost on a link that went down; 3 got through once it was back.
  CHECK(h.send(3) == 0);
  // The trainer, reintroduced, sends 1, 2 and 3 again: 1 and 2 are stored, 3 not twice.
  CHECK(h.send(1) == 1);
  CHECK(h.send(2) == 3);
  CHECK(h.send(3) == 3);
  CHECK(h.logs() == std::vector<std::string>{"line 3", "line 1", "line 2"});
  // 4 and 5 dropped by the trainer at its bound, 6-8 lost on the way: 9 says it keeps 6 on.
  CHECK(h.send(9, 6) == 5);
  CHECK(h.send(6, 6) == 6);
  CHECK(h.send(7, 6) == 7);
  CHECK(h.send(8, 6) == 9);
  CHECK(h.logs() ==
        std::vector<std::string>{"line 3", "line 1", "line 2", "line 9", "line 6", "line 7", "line 8"});
}

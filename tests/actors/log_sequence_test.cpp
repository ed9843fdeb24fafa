// The head's record of which output lines of running attempts it stored: lines a trainer sends
// again after a failover are stored once, and none is lost.
#include <catch2/catch.hpp>

#include "actors/log_sequence.hpp"

using namespace cohort::actors;
using json = nlohmann::json;

namespace {

log_line numbered(std::int32_t attempt, std::uint64_t seq) {
  log_line l{"job-3", 0, "n1", 42, "line " + std::to_string(seq)};
  l.attempt = attempt;
  l.seq = seq;
  return l;
}

}  // namespace

TEST_CASE("a head that took over stores the lines a trainer sends again only past those an earlier "
          "head stored, judging by the trainer's numbers and not the store's",
          "[actors]") {
  log_sequence seen;
  // As the store kept them: its own "seq" counts every line of the job (here past the trainer's).
  for (std::uint64_t n = 1; n <= 3; ++n) {
    auto stored = log_sequence::stored_fields(numbered(1, n));
    stored["seq"] = 100 + n;
    stored["line"] = "line " + std::to_string(n);
    seen.restore("job-3", stored);
  }
  seen.restore("job-3", json{{"seq", 7}, {"line", "a line of an older head, unnumbered"}});
  CHECK(seen.highest("job-3", 1) == 3);
  CHECK_FALSE(seen.is_new(numbered(1, 2)));
  CHECK_FALSE(seen.is_new(numbered(1, 3)));
  CHECK(seen.is_new(numbered(1, 4)));  // written while no leader was reachable
  seen.stored(numbered(1, 4));
  CHECK_FALSE(seen.is_new(numbered(1, 4)));
  CHECK(seen.is_new(numbered(0, 1)));  // another attempt numbers its own
  log_line outside{"job-3", -1, "n1", 0, "trainer: a line outside the sequence"};
  CHECK(seen.is_new(outside));
  seen.forget("job-3", 1);
  CHECK(seen.highest("job-3", 1) == 0);
}

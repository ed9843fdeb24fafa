// The head's record of which output lines of running attempts it stored: lines a trainer sends
// again (after a failover, or a link that went down) are stored once, and none is acknowledged
// before it is stored.
#include <catch2/catch.hpp>

#include "actors/log_sequence.hpp"

using namespace cohort::actors;
using json = nlohmann::json;

namespace {

log_line numbered(std::int32_t attempt, std::uint64_t seq, std::uint64_t kept_from = 1) {
  log_line l{"job-3", 0, "n1", 42, "line " + std::to_string(seq)};
  l.attempt = attempt;
  l.seq = seq;
  l.kept_from = kept_from;
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
  CHECK(seen.through("job-3", 1) == 3);
  CHECK_FALSE(seen.is_new(numbered(1, 2)));
  CHECK_FALSE(seen.is_new(numbered(1, 3)));
  CHECK(seen.is_new(numbered(1, 4)));  // written while no leader was reachable
  seen.stored(numbered(1, 4));
  CHECK_FALSE(seen.is_new(numbered(1, 4)));
  CHECK(seen.is_new(numbered(0, 1)));  // another attempt numbers its own
  log_line outside{"job-3", -1, "n1", 0, "trainer: a line outside the sequence"};
  CHECK(seen.is_new(outside));
  seen.forget("job-3", 1);
  CHECK(seen.through("job-3", 1) == 0);
}

TEST_CASE(
    "a line lost on a link that went down while a later one got through is still stored when "
    "its trainer sends it again, and no acknowledgement passes it before that",
    "[actors]") {
  log_sequence seen;
  for (std::uint64_t n = 1; n <= 3; ++n) seen.stored(numbered(1, n));
  // Lines 4 and 5 were lost on the way; 6, sent once the link was back, got through first.
  CHECK(seen.through_after(numbered(1, 6)) == 3);
  seen.stored(numbered(1, 6));
  CHECK(seen.through("job-3", 1) == 3);  // the trainer keeps 4, 5 and 6
  CHECK_FALSE(seen.is_new(numbered(1, 6)));
  // The trainer reintroduces itself and sends 4, 5 and 6 again: 4 and 5 are stored, 6 is not twice.
  CHECK(seen.is_new(numbered(1, 4)));
  CHECK(seen.through_after(numbered(1, 4)) == 4);
  seen.stored(numbered(1, 4));
  CHECK(seen.through_after(numbered(1, 5)) == 6);
  seen.stored(numbered(1, 5));
  CHECK(seen.through("job-3", 1) == 6);
  CHECK_FALSE(seen.is_new(numbered(1, 5)));
  CHECK(seen.is_new(numbered(1, 7)));
}

TEST_CASE(
    "lines a trainer dropped unacknowledged are not waited for: the oldest line it keeps says "
    "where its output goes on",
    "[actors]") {
  log_sequence seen;
  seen.stored(numbered(1, 1));
  seen.stored(numbered(1, 9, 5));  // 2-4 dropped by the trainer, 5-8 lost on the way
  CHECK(seen.through("job-3", 1) == 4);
  seen.stored(numbered(1, 5, 5));
  CHECK(seen.through("job-3", 1) == 5);
  seen.stored(numbered(1, 20, 12));  // 6-11 dropped too, by now
  CHECK(seen.through("job-3", 1) == 11);
  CHECK_FALSE(seen.is_new(numbered(1, 9)));
  CHECK(seen.is_new(numbered(1, 12, 12)));
}

TEST_CASE(
    "a head that took over waits for the lines an earlier head never got: the gap in the "
    "stored numbers is restored with them",
    "[actors]") {
  log_sequence seen;
  for (std::uint64_t n : {1, 2, 4}) seen.restore("job-3", log_sequence::stored_fields(numbered(1, n)));
  CHECK(seen.through("job-3", 1) == 2);
  CHECK(seen.is_new(numbered(1, 3)));
  CHECK_FALSE(seen.is_new(numbered(1, 4)));
  seen.stored(numbered(1, 3));
  CHECK(seen.through("job-3", 1) == 4);
}

// A leading head's term (actors/leader_session.hpp): how long it may act on its lease, what an
// unanswered or refused renewal does, and that a term ends once.
#include <catch2/catch.hpp>

#include "actors/leader_session.hpp"

using cohort::actors::leader_session;
using namespace std::chrono_literals;

namespace {
const leader_session::clock::time_point t0{};
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
    "a renewal the store did not answer leaves the head leading while its lease lasts, and "
    "cuts it off past it",
    "[actors]") {
  leader_session s(10s, t0);
  CHECK(s.on_renewal(t0 + 1s, false, false, t0 + 4s) == leader_session::verdict::leads);
  CHECK(s.valid_until() == t0 + 5s);
  CHECK(s.on_renewal(t0 + 2s, false, false, t0 + 5s) == leader_session::verdict::cut_off);
}

TEST_CASE(
    "a renewal refused because another head claimed a newer epoch ends the term at once, "
    "however much lease seemed left",
    "[actors]") {
  leader_session s(10s, t0);
  CHECK(s.on_renewal(t0 + 1s, true, false, t0 + 1s) == leader_session::verdict::superseded);
}

TEST_CASE("a term ends once, and an ended term is never known good", "[actors]") {
  leader_session s(10s, t0);
  CHECK_FALSE(s.ended());
  CHECK(s.end());
  CHECK_FALSE(s.end());
  CHECK(s.ended());
  CHECK_FALSE(s.known_good(t0));
}

// The head's links to its nodes (actors/node_registry.hpp): which handle speaks for a node name,
// a node's new process replacing its predecessor, and downs and silences naming the node once.
#include <catch2/catch.hpp>

#include "actors/node_registry.hpp"

using cohort::actors::node_registry;

namespace {
using registry = node_registry<std::string, int>;  // handles named, downs keyed by number
}

TEST_CASE("a node that says hello is found by its name and named by its handle's down", "[actors]") {
  registry r;
  CHECK_FALSE(r.join("n1", 1, "proc-1"));
  CHECK(r.find("n1") == std::optional<std::string>("proc-1"));
  CHECK(r.speaks_for("n1", "proc-1"));
  CHECK_FALSE(r.speaks_for("n1", "proc-2"));
  CHECK_FALSE(r.speaks_for("n2", "proc-1"));
  CHECK(r.on_down(1) == std::optional<std::string>("n1"));
  CHECK_FALSE(r.on_down(1));  // once
}

TEST_CASE("the same process saying hello again replaces nothing", "[actors]") {
  registry r;
  r.join("n1", 1, "proc-1");
  CHECK_FALSE(r.join("n1", 1, "proc-1"));
  CHECK(r.on_down(1) == std::optional<std::string>("n1"));
}

TEST_CASE("a node's new process replaces its predecessor, whose down then names no node", "[actors]") {
  registry r;
  r.join("n1", 1, "proc-1");
  CHECK(r.join("n1", 2, "proc-2") == std::optional<std::string>("proc-1"));
  CHECK(r.find("n1") == std::optional<std::string>("proc-2"));
  CHECK_FALSE(r.speaks_for("n1", "proc-1"));
  CHECK_FALSE(r.on_down(1));
  CHECK(r.on_down(2) == std::optional<std::string>("n1"));
}

TEST_CASE(
    "a node that fell silent gives its handle back once, and its down still to come names no "
    "node; forgotten, no handle speaks for it",
    "[actors]") {
  registry r;
  r.join("n1", 1, "proc-1");
  r.join("n2", 2, "proc-2");
  CHECK(r.silent("n1") == std::optional<std::string>("proc-1"));
  CHECK_FALSE(r.on_down(1));
  r.forget("n1");
  CHECK_FALSE(r.find("n1"));
  CHECK_FALSE(r.silent("n1"));
  CHECK(r.find("n2") == std::optional<std::string>("proc-2"));
  r.forget("n2");
  CHECK_FALSE(r.on_down(2));
}

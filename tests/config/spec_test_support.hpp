// Test support for the config tests: expect_spec_error() runs a parser that must throw and returns
// the spec_error; patched_spec() builds a minimal valid job spec with a JSON merge patch applied.
#pragma once

#include <functional>
#include <string>

#include <catch2/catch.hpp>

#include "config/job_spec.hpp"

namespace cohort::config::testing {

inline spec_error expect_spec_error(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const spec_error& e) {
    return e;
  }
  FAIL("expected a spec_error, but parsing succeeded");
  throw std::logic_error("unreachable");
}

// Parses a job spec built from a minimal valid one with json_patch merged in (RFC 7386 semantics).
std::string patched_spec(const std::string& json_patch);

}  // namespace cohort::config::testing

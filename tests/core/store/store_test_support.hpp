// What the store tests share: a job spec to store and the kind of store_error an action throws.
#pragma once

#include <functional>
#include <string>

#include <catch2/catch.hpp>

#include "core/store/store_error.hpp"

namespace cohort::test {

inline const std::string store_spec_text = "{\n  \"name\": \"quickstart\",\n  \"num_workers\": 2\n}\n";

// The kind of the store_error `fn` throws; fails the test when it throws none.
inline core::store::store_error_kind store_error_kind_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const core::store::store_error& e) {
    return e.kind();
  }
  FAIL("no store_error thrown");
  return core::store::store_error_kind::io;
}

}  // namespace cohort::test

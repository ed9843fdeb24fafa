// Catch2 for tests that also include libtorch, whose glog defines a CHECK of its own: glog comes
// first here, then Catch's CHECK is (re)defined, so Catch's wins whatever order the headers come
// in, also when a unity build joins several test files into one translation unit (where an
// earlier file has already included catch.hpp, whose include guard would skip it).
#pragma once

#include <c10/util/Logging.h>

#undef CHECK
#include <catch2/catch.hpp>
#undef CHECK
#define CHECK(...) INTERNAL_CATCH_TEST("CHECK", Catch::ResultDisposition::ContinueOnFailure, __VA_ARGS__)

// Tests of the streaming XXH64 checksum against known digests.
#include <catch2/catch.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "core/data/checksum.hpp"

using namespace cohort::core::data;

TEST_CASE("xxh64 matches the reference digests of libxxhash", "[core][data]") {
  CHECK(xxh64("", 0) == 0xef46db3751d8e999ULL);
  CHECK(xxh64("a", 1) == 0xd24ec4f1a98c6e5bULL);
  CHECK(xxh64("abc", 3) == 0x44bc2cf5ad770999ULL);
  CHECK(xxh64("hello world", 11, 7) == 0xe3188f1f1023e4d0ULL);
  std::string long_input;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 256; ++i) long_input += static_cast<char>(i);
  long_input += "xyz";
  CHECK(xxh64(long_input.data(), long_input.size()) == 0xe921a1b45bd779f8ULL);
  CHECK(to_hex64(0xe921a1b45bd779f8ULL) == "e921a1b45bd779f8");
}

TEST_CASE("xxh64 streaming gives the same digest for any split of the input", "[core][data]") {
  std::string input;
  for (int i = 0; i < 1000; ++i) input += static_cast<char>(i * 7 + 3);
  const auto whole = xxh64(input.data(), input.size());
  for (std::size_t step : {1u, 3u, 31u, 32u, 33u, 100u, 999u}) {
    xxh64_stream s;
    for (std::size_t i = 0; i < input.size(); i += step) s.update(input.data() + i, std::min(step, input.size() - i));
    CHECK(s.digest() == whole);
  }
}

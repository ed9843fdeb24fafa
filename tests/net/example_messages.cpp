// Example wire messages for the net tests and the fuzz target (see example_messages.hpp).
#include "tests/net/example_messages.hpp"

#include <limits>

namespace cohort::net::test {

everything full_example() {
  everything x;
  x.flag = true;
  x.i8 = std::numeric_limits<std::int8_t>::min();
  x.u8 = std::numeric_limits<std::uint8_t>::max();
  x.i16 = std::numeric_limits<std::int16_t>::min();
  x.u16 = std::numeric_limits<std::uint16_t>::max();
  x.i32 = std::numeric_limits<std::int32_t>::min();
  x.u32 = std::numeric_limits<std::uint32_t>::max();
  x.i64 = std::numeric_limits<std::int64_t>::min();
  x.u64 = std::numeric_limits<std::uint64_t>::max();
  x.f32 = 1.5f;
  x.f64 = -2.25e300;
  x.text = "h\xc3\xa9llo \0 world";
  x.text.push_back('\0');
  x.numbers = {0, -1, 1, 1 << 30};
  x.bits = {true, false, true};
  x.words = {"", "a", std::string(300, 'z')};
  x.weights = {{"CPU", 4.0}, {"large_cpu_mem", 0.01}};
  x.tracks = {{"empty", {}}, {"two", {{1, 2}, {3, 4}}}};
  x.maybe_text = "present";
  x.maybe_point = std::nullopt;
  x.shade = color::blue;
  x.origin = {-1.0, 0.5};
  x.sparse = {std::nullopt, 7, std::nullopt, -9};
  return x;
}

} // namespace cohort::net::test

// Example wire messages for the net tests and the frame-decoder fuzz target (the real messages
// live in actors/messages.hpp). Between them they use every supported field type.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "net/wire_message.hpp"

namespace cohort::net::test {

enum class color : std::uint8_t { red, green, blue };
constexpr color wire_enum_max(color) { return color::blue; }

struct point {
  double x = 0;
  double y = 0;
  bool operator==(const point& o) const { return x == o.x && y == o.y; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, point& x) {
  return f(caf::meta::type_name("point"), x.x, x.y);
}

struct everything {
  static constexpr std::uint32_t wire_id = 1;
  bool flag = false;
  std::int8_t i8 = 0;
  std::uint8_t u8 = 0;
  std::int16_t i16 = 0;
  std::uint16_t u16 = 0;
  std::int32_t i32 = 0;
  std::uint32_t u32 = 0;
  std::int64_t i64 = 0;
  std::uint64_t u64 = 0;
  float f32 = 0;
  double f64 = 0;
  std::string text;
  std::vector<std::int32_t> numbers;
  std::vector<bool> bits;
  std::vector<std::string> words;
  std::map<std::string, double> weights;
  std::map<std::string, std::vector<point>> tracks;
  std::optional<std::string> maybe_text;
  std::optional<point> maybe_point;
  color shade = color::red;
  point origin;
  std::vector<std::optional<std::int64_t>> sparse;

  bool operator==(const everything& o) const {
    return flag == o.flag && i8 == o.i8 && u8 == o.u8 && i16 == o.i16 && u16 == o.u16
           && i32 == o.i32 && u32 == o.u32 && i64 == o.i64 && u64 == o.u64 && f32 == o.f32
           && f64 == o.f64 && text == o.text && numbers == o.numbers && bits == o.bits
           && words == o.words && weights == o.weights && tracks == o.tracks
           && maybe_text == o.maybe_text && maybe_point == o.maybe_point && shade == o.shade
           && origin == o.origin && sparse == o.sparse;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, everything& x) {
  return f(caf::meta::type_name("everything"), x.flag, x.i8, x.u8, x.i16, x.u16, x.i32, x.u32,
           x.i64, x.u64, x.f32, x.f64, x.text, x.numbers, x.bits, x.words, x.weights, x.tracks,
           x.maybe_text, x.maybe_point, x.shade, x.origin, x.sparse);
}

struct ping {
  static constexpr std::uint32_t wire_id = 2;
  std::uint64_t seq = 0;
  std::string from;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ping& x) {
  return f(caf::meta::type_name("ping"), x.seq, x.from);
}

struct small {
  static constexpr std::uint32_t wire_id = 3;
  std::uint16_t port = 0;
  color shade = color::red;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, small& x) {
  return f(caf::meta::type_name("small"), x.port, x.shade);
}

using example_types = wire_types<everything, ping, small>;

// A value that sets every field, with extremes where a type has them.
everything full_example();

} // namespace cohort::net::test

// A CAF 0.17-style loading inspector that fills a message from a msgpack object, checking every
// field's type, count and range. Errors throw body_error naming the field, e.g.
// "node_heartbeat.field[2]: expected an integer in [0, 65535], got 70000" (a field that its
// inspect names, net/field_name.hpp, by its name: "job_record.attempts: ...").
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/meta/annotation.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/save_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <msgpack.hpp>

#include "net/field_name.hpp"
#include "net/wire_message.hpp"

namespace cohort::net {

// A frame's body does not match the message's field list.
struct body_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Where in a message a value sits; a chain of stack-allocated links, rendered only on error.
struct field_path {
  const field_path* parent = nullptr;
  const char* type_name = nullptr; // struct being read, when this link is a struct field
  std::size_t index = 0;           // field or element index
  const std::string* key = nullptr; // map key, when this link is a map value
  const char* field_name = nullptr; // the field's name, when its inspect names it (field_name.hpp)
  std::string str() const;
};

const char* msgpack_type_name(const msgpack::object& o);

class msgpack_reader {
public:
  using result_type = void;
  static constexpr bool reads_state = false;
  static constexpr bool writes_state = true;

  msgpack_reader(const msgpack::object& obj, const field_path* where) : obj_(obj), where_(where) {}

  // One struct: expects an array with exactly one element per (non-annotation) field.
  template <class... Ts>
  void operator()(Ts&&... xs) {
    constexpr std::uint32_t fields =
      (0u + ... + (caf::meta::is_annotation<std::decay_t<Ts>>::value ? 0u : 1u));
    if (obj_.type != msgpack::type::ARRAY)
      fail(*where_, "expected an array of " + std::to_string(fields) + " fields", obj_);
    if (obj_.via.array.size != fields)
      fail(*where_, "expected " + std::to_string(fields) + " fields, got "
                      + std::to_string(obj_.via.array.size), obj_);
    next_ = 0;
    (handle(xs), ...);
  }

  // Reads one value `o` (at `at`) into x.
  static void read(const msgpack::object& o, bool& x, const field_path& at) {
    if (o.type != msgpack::type::BOOLEAN)
      fail(at, "expected a boolean", o);
    x = o.via.boolean;
  }

  static void read(const msgpack::object& o, std::string& x, const field_path& at) {
    if (o.type != msgpack::type::STR)
      fail(at, "expected a string", o);
    x.assign(o.via.str.ptr, o.via.str.size);
  }

  template <class T>
  static std::enable_if_t<std::is_floating_point_v<T>>
  read(const msgpack::object& o, T& x, const field_path& at) {
    switch (o.type) {
      case msgpack::type::FLOAT32:
      case msgpack::type::FLOAT64: x = static_cast<T>(o.via.f64); return;
      case msgpack::type::POSITIVE_INTEGER: x = static_cast<T>(o.via.u64); return;
      case msgpack::type::NEGATIVE_INTEGER: x = static_cast<T>(o.via.i64); return;
      default: fail(at, "expected a number", o);
    }
  }

  template <class T>
  static std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>
  read(const msgpack::object& o, T& x, const field_path& at) {
    x = read_integer<T>(o, at, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
  }

  template <class T>
  static std::enable_if_t<std::is_enum_v<T>>
  read(const msgpack::object& o, T& x, const field_path& at) {
    using under = std::underlying_type_t<T>;
    x = static_cast<T>(read_integer<under>(o, at, under{0}, enum_max_value<T>()));
  }

  template <class T>
  static void read(const msgpack::object& o, std::vector<T>& xs, const field_path& at) {
    if (o.type != msgpack::type::ARRAY)
      fail(at, "expected an array", o);
    xs.clear();
    xs.reserve(o.via.array.size);
    for (std::uint32_t i = 0; i < o.via.array.size; ++i) {
      field_path elem{&at, nullptr, i, nullptr};
      T value{};
      read(o.via.array.ptr[i], value, elem);
      xs.push_back(std::move(value));
    }
  }

  template <class T>
  static void read(const msgpack::object& o, std::map<std::string, T>& xs, const field_path& at) {
    if (o.type != msgpack::type::MAP)
      fail(at, "expected a map", o);
    xs.clear();
    for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      field_path key_at{&at, nullptr, i, nullptr};
      std::string key;
      read(kv.key, key, key_at);
      field_path value_at{&at, nullptr, i, &key};
      T value{};
      read(kv.val, value, value_at);
      if (!xs.emplace(std::move(key), std::move(value)).second)
        fail(value_at, "duplicate map key", kv.key);
    }
  }

  template <class T>
  static void read(const msgpack::object& o, std::optional<T>& x, const field_path& at) {
    if (o.type == msgpack::type::NIL) {
      x.reset();
      return;
    }
    T value{};
    read(o, value, at);
    x = std::move(value);
  }

  // Nested structs with their own inspect.
  template <class T>
  static auto read(const msgpack::object& o, T& x, const field_path& at)
    -> decltype(inspect(std::declval<msgpack_reader&>(), x), void()) {
    msgpack_reader nested{o, &at};
    inspect(nested, x);
  }

  [[noreturn]] static void fail(const field_path& at, const std::string& what,
                                const msgpack::object& got);

private:
  template <class T>
  static T read_integer(const msgpack::object& o, const field_path& at, T lo, T hi) {
    if (o.type == msgpack::type::POSITIVE_INTEGER) {
      if (o.via.u64 <= static_cast<std::uint64_t>(hi))
        return static_cast<T>(o.via.u64);
    } else if (o.type == msgpack::type::NEGATIVE_INTEGER) {
      if constexpr (std::is_signed_v<T>)
        if (o.via.i64 >= static_cast<std::int64_t>(lo))
          return static_cast<T>(o.via.i64);
    }
    fail(at, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", o);
  }

  template <class T>
  void handle(T& x) {
    using type = std::decay_t<T>;
    if constexpr (std::is_same_v<type, caf::meta::type_name_t>) {
      type_name_ = x.value;
    } else if constexpr (std::is_same_v<type, field_name_t>) {
      field_name_ = x.name;
    } else if constexpr (caf::meta::is_load_callback<type>::value) {
      if (auto err = x.fun()) {
        field_path here{where_, type_name_, next_, nullptr};
        throw body_error(here.str() + ": the message's load_callback refused the values");
      }
    } else if constexpr (caf::meta::is_annotation<type>::value) {
      // save callbacks and other annotations do not read anything
    } else {
      field_path here{where_, type_name_, next_, nullptr, field_name_};
      read(obj_.via.array.ptr[next_], const_cast<type&>(x), here);
      field_name_ = nullptr;
      ++next_;
    }
  }

  const msgpack::object& obj_;
  const field_path* where_;
  const char* type_name_ = "message";
  std::uint32_t next_ = 0;
  const char* field_name_ = nullptr;  // the name of the field that follows, when given
};

} // namespace cohort::net

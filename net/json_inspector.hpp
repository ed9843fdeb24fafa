// JSON views of messages, driven by the same inspect field list as CAF and the msgpack wire
// (net/msgpack_writer.hpp, net/msgpack_reader.hpp): a struct is a JSON object whose keys are the
// names its inspect gives each field (net/field_name.hpp). Values: bool, integers, numbers (NaN
// and infinities are written as they are; nlohmann's dump makes them null, which reads back as
// NaN), strings, arrays (std::vector), objects (std::map<std::string, T>), null for an empty
// std::optional, an enum as the text its to_string gives (one of its values 0..wire_enum_max),
// and nested structs as objects. Reading checks every field's presence, type and range and
// throws json_error naming the field, e.g. `job_record.failures[0].rank: expected an integer in
// [-2147483648, 2147483647], got "x"`; keys it does not know are ignored. Header only, stateless.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/meta/annotation.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/save_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <nlohmann/json.hpp>

#include "net/field_name.hpp"
#include "net/wire_message.hpp"

namespace cohort::net {

// JSON that does not fit a message's field list; what() names the field and what was expected.
struct json_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

namespace detail {

// 1: a field name; 2: another annotation; 3: a field.
template <class T>
constexpr int json_item_kind() {
  using type = std::decay_t<T>;
  if constexpr (std::is_same_v<type, field_name_t>) return 1;
  else if constexpr (caf::meta::is_annotation<type>::value) return 2;
  else return 3;
}

// Whether every field of an inspect list directly follows its name.
template <class... Ts>
constexpr bool every_field_named() {
  constexpr int kinds[] = {0, json_item_kind<Ts>()...};
  bool named = false;
  for (int k : kinds) {
    if (k == 3 && !named) return false;
    named = k == 1;
  }
  return true;
}

}  // namespace detail

// Where in a JSON view a value sits; a chain of stack-allocated links, rendered only on error.
struct json_path {
  const json_path* parent = nullptr;
  const char* name = nullptr;          // a struct's field (or the root's type name)
  std::size_t index = 0;               // an array element, when name and key are null
  const std::string* key = nullptr;    // an object (map) value
  std::string str() const {
    std::string head = parent ? parent->str() : std::string();
    if (name) return parent ? head + "." + name : std::string(name);
    if (key) return head + "[\"" + *key + "\"]";
    return head + "[" + std::to_string(index) + "]";
  }
};

class json_writer {
 public:
  using result_type = void;
  static constexpr bool reads_state = true;
  static constexpr bool writes_state = false;

  explicit json_writer(nlohmann::json& out) : out_(out) {}

  // One struct: an object, one key per named field (wire_only fields left out).
  template <class... Ts>
  void operator()(Ts&&... xs) {
    static_assert(detail::every_field_named<Ts...>(),
                  "a message in a JSON view names every field: net::field(\"name\") before it in inspect");
    out_ = nlohmann::json::object();
    (handle(xs), ...);
  }

  static nlohmann::json value(bool x) { return x; }
  static nlohmann::json value(const std::string& x) { return x; }
  template <class T>
  static std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, nlohmann::json> value(T x) {
    return x;
  }
  template <class T>
  static std::enable_if_t<std::is_enum_v<T>, nlohmann::json> value(T x) {
    enum_max_value<T>();  // the enum must be declared for the wire
    return std::string(to_string(x));
  }
  template <class T>
  static nlohmann::json value(const std::vector<T>& xs) {
    auto out = nlohmann::json::array();
    for (const auto& x : xs) out.push_back(value(static_cast<const T&>(x)));
    return out;
  }
  template <class T>
  static nlohmann::json value(const std::map<std::string, T>& xs) {
    auto out = nlohmann::json::object();
    for (const auto& [k, v] : xs) out[k] = value(v);
    return out;
  }
  template <class T>
  static nlohmann::json value(const std::optional<T>& x) {
    return x ? value(*x) : nlohmann::json(nullptr);
  }
  // Nested structs with their own inspect.
  template <class T>
  static auto value(const T& x)
      -> decltype(inspect(std::declval<json_writer&>(), std::declval<T&>()), nlohmann::json()) {
    nlohmann::json out;
    json_writer nested{out};
    inspect(nested, const_cast<T&>(x));
    return out;
  }

 private:
  template <class T>
  void handle(T& x) {
    using type = std::decay_t<T>;
    if constexpr (std::is_same_v<type, field_name_t>) {
      name_ = x;
    } else if constexpr (caf::meta::is_save_callback<type>::value) {
      if (auto err = x.fun()) throw json_error("a save_callback refused the message");
    } else if constexpr (caf::meta::is_annotation<type>::value) {
      // type names and load callbacks do not reach JSON
    } else {
      if (name_.presence != field_presence::wire_only) out_[name_.name] = value(static_cast<const type&>(x));
    }
  }

  nlohmann::json& out_;
  field_name_t name_{"", field_presence::required};
};

class json_reader {
 public:
  using result_type = void;
  static constexpr bool reads_state = false;
  static constexpr bool writes_state = true;

  // `where`: the path of `obj`; null at the root (named by the struct's type name).
  json_reader(const nlohmann::json& obj, const json_path* where) : obj_(obj), where_(where) {}

  // One struct: an object holding every required field.
  template <class... Ts>
  void operator()(Ts&&... xs) {
    static_assert(detail::every_field_named<Ts...>(),
                  "a message in a JSON view names every field: net::field(\"name\") before it in inspect");
    (capture_root(xs), ...);
    if (!obj_.is_object()) fail(here_struct(), "expected an object", obj_);
    (handle(xs), ...);
  }

  static void read(const nlohmann::json& j, bool& x, const json_path& at) {
    if (!j.is_boolean()) fail(at, "expected true or false", j);
    x = j.get<bool>();
  }
  static void read(const nlohmann::json& j, std::string& x, const json_path& at) {
    if (!j.is_string()) fail(at, "expected a string", j);
    x = j.get<std::string>();
  }
  template <class T>
  static std::enable_if_t<std::is_floating_point_v<T>> read(const nlohmann::json& j, T& x,
                                                             const json_path& at) {
    if (j.is_null()) {  // what dump makes of NaN and infinities
      x = std::numeric_limits<T>::quiet_NaN();
      return;
    }
    if (!j.is_number()) fail(at, "expected a number", j);
    x = j.get<T>();
  }
  template <class T>
  static std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>> read(const nlohmann::json& j,
                                                                                   T& x, const json_path& at) {
    // Checked before any conversion: get<T>() of a float or an integer out of T's range is not.
    if (j.is_number_unsigned()) {
      const auto u = j.get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
        x = static_cast<T>(u);
        return;
      }
    } else if (j.is_number_integer()) {
      const auto i = j.get<std::int64_t>();
      if constexpr (std::is_signed_v<T>) {
        if (i >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
            i <= static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
          x = static_cast<T>(i);
          return;
        }
      } else if (i >= 0 && static_cast<std::uint64_t>(i) <= std::numeric_limits<T>::max()) {
        x = static_cast<T>(i);
        return;
      }
    }
    fail(at, "expected an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                 std::to_string(std::numeric_limits<T>::max()) + "]",
         j);
  }
  template <class T>
  static std::enable_if_t<std::is_enum_v<T>> read(const nlohmann::json& j, T& x, const json_path& at) {
    using under = std::underlying_type_t<T>;
    std::string allowed;
    for (under v = 0;; ++v) {
      const std::string name = to_string(static_cast<T>(v));
      if (j.is_string() && j.get<std::string>() == name) {
        x = static_cast<T>(v);
        return;
      }
      allowed += (allowed.empty() ? "" : ", ") + name;
      if (v == enum_max_value<T>()) break;
    }
    fail(at, "expected one of " + allowed, j);
  }
  template <class T>
  static void read(const nlohmann::json& j, std::vector<T>& xs, const json_path& at) {
    if (!j.is_array()) fail(at, "expected an array", j);
    xs.clear();
    xs.reserve(j.size());
    for (std::size_t i = 0; i < j.size(); ++i) {
      json_path elem{&at, nullptr, i, nullptr};
      T value{};
      read(j[i], value, elem);
      xs.push_back(std::move(value));
    }
  }
  template <class T>
  static void read(const nlohmann::json& j, std::map<std::string, T>& xs, const json_path& at) {
    if (!j.is_object()) fail(at, "expected an object", j);
    xs.clear();
    for (const auto& [key, v] : j.items()) {
      const std::string k = key;
      json_path value_at{&at, nullptr, 0, &k};
      T value{};
      read(v, value, value_at);
      xs.emplace(k, std::move(value));
    }
  }
  template <class T>
  static void read(const nlohmann::json& j, std::optional<T>& x, const json_path& at) {
    if (j.is_null()) {
      x.reset();
      return;
    }
    T value{};
    read(j, value, at);
    x = std::move(value);
  }
  // Nested structs with their own inspect.
  template <class T>
  static auto read(const nlohmann::json& j, T& x, const json_path& at)
      -> decltype(inspect(std::declval<json_reader&>(), x), void()) {
    json_reader nested{j, &at};
    inspect(nested, x);
  }

  [[noreturn]] static void fail(const json_path& at, const std::string& what, const nlohmann::json& got) {
    auto text = got.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    throw json_error(at.str() + ": " + what + ", got " + text);
  }

 private:
  template <class T>
  void capture_root(const T& x) {
    if constexpr (std::is_same_v<std::decay_t<T>, caf::meta::type_name_t>) root_.name = x.value;
  }
  const json_path& here_struct() const { return where_ ? *where_ : root_; }

  template <class T>
  void handle(T& x) {
    using type = std::decay_t<T>;
    if constexpr (std::is_same_v<type, field_name_t>) {
      name_ = x;
    } else if constexpr (caf::meta::is_load_callback<type>::value) {
      if (auto err = x.fun()) throw json_error(here_struct().str() + ": the values were refused");
    } else if constexpr (caf::meta::is_annotation<type>::value) {
      // type names and save callbacks read nothing
    } else {
      if (name_.presence == field_presence::wire_only) return;
      json_path here{&here_struct(), name_.name, 0, nullptr};
      auto it = obj_.find(name_.name);
      if (it == obj_.end()) {
        if (name_.presence == field_presence::defaulted) return;
        throw json_error(here.str() + ": missing");
      }
      read(*it, const_cast<type&>(x), here);
    }
  }

  const nlohmann::json& obj_;
  const json_path* where_;
  json_path root_{nullptr, "message", 0, nullptr};
  field_name_t name_{"", field_presence::required};
};

// `x` as its JSON view.
template <class T>
nlohmann::json to_json_view(const T& x) {
  return json_writer::value(x);
}

// The T that JSON view `j` describes; throws json_error naming the first field that does not fit.
template <class T>
T from_json_view(const nlohmann::json& j) {
  T x{};
  json_reader reader{j, nullptr};
  inspect(reader, x);
  return x;
}

// The same from JSON text; text that is not JSON throws json_error naming `what`.
template <class T>
T from_json_text(const std::string& text, const std::string& what) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) throw json_error(what + ": not JSON");
  return from_json_view<T>(j);
}

}  // namespace cohort::net

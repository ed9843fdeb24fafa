// A CAF 0.17-style saving inspector that packs a message's inspect field list as a msgpack array.
// Stateless apart from the packer it writes to; one writer per encode call.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/meta/annotation.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/save_callback.hpp>
#include <msgpack.hpp>

#include "net/wire_message.hpp"

namespace cohort::net {

// A message cannot be encoded (a save_callback failed, or the frame breaks the limits).
struct encode_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class msgpack_writer {
public:
  using result_type = void;
  static constexpr bool reads_state = true;
  static constexpr bool writes_state = false;

  explicit msgpack_writer(msgpack::packer<msgpack::sbuffer>& out) : out_(out) {}

  // One struct: [field0, field1, ...]; annotations are not written.
  template <class... Ts>
  void operator()(Ts&&... xs) {
    constexpr std::uint32_t fields =
      (0u + ... + (caf::meta::is_annotation<std::decay_t<Ts>>::value ? 0u : 1u));
    out_.pack_array(fields);
    (handle(xs), ...);
  }

  void apply(bool x) { x ? out_.pack_true() : out_.pack_false(); }
  void apply(const std::string& x) { out_.pack(x); }
  void apply(float x) { out_.pack_float(x); }
  // msgpack-c packs an integral double as an integer, and for exactly 2^64 converts it to
  // uint64_t first: undefined behaviour (found by fuzz_frame_decoder). That one value is a power
  // of two, exact as a float32, which reads back as the same double.
  void apply(double x) {
    if (x == 18446744073709551616.0) {
      out_.pack_float(static_cast<float>(x));
    } else {
      out_.pack_double(x);
    }
  }

  template <class T>
  std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>> apply(T x) {
    if constexpr (std::is_signed_v<T>)
      out_.pack_int64(static_cast<std::int64_t>(x));
    else
      out_.pack_uint64(static_cast<std::uint64_t>(x));
  }

  template <class T>
  std::enable_if_t<std::is_enum_v<T>> apply(T x) {
    enum_max_value<T>(); // the enum must be declared for the wire
    apply(static_cast<std::underlying_type_t<T>>(x));
  }

  template <class T>
  void apply(const std::vector<T>& xs) {
    out_.pack_array(checked_size(xs.size()));
    for (const auto& x : xs)
      apply(static_cast<const T&>(x));
  }

  void apply(const std::vector<bool>& xs) {
    out_.pack_array(checked_size(xs.size()));
    for (bool x : xs)
      apply(x);
  }

  template <class T>
  void apply(const std::map<std::string, T>& xs) {
    out_.pack_map(checked_size(xs.size()));
    for (const auto& [key, value] : xs) {
      apply(key);
      apply(value);
    }
  }

  template <class T>
  void apply(const std::optional<T>& x) {
    if (x)
      apply(*x);
    else
      out_.pack_nil();
  }

  // Nested structs with their own inspect.
  template <class T>
  auto apply(const T& x) -> decltype(inspect(std::declval<msgpack_writer&>(), std::declval<T&>())) {
    return inspect(*this, const_cast<T&>(x));
  }

private:
  template <class T>
  void handle(T& x) {
    using type = std::decay_t<T>;
    if constexpr (caf::meta::is_save_callback<type>::value) {
      if (auto err = x.fun())
        throw encode_error("a save_callback refused the message");
    } else if constexpr (caf::meta::is_annotation<type>::value) {
      // type names and load callbacks do not reach the wire
    } else {
      apply(static_cast<const type&>(x));
    }
  }

  static std::uint32_t checked_size(std::size_t n) {
    if (n > UINT32_MAX)
      throw encode_error("a container has more than 2^32-1 elements");
    return static_cast<std::uint32_t>(n);
  }

  msgpack::packer<msgpack::sbuffer>& out_;
};

} // namespace cohort::net

// How a wire message is declared: a plain struct with `static constexpr std::uint32_t wire_id` and
// one CAF 0.17 `inspect` field list that drives both CAF serialization and the msgpack codec.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include <caf/detail/scope_guard.hpp>
#include <caf/meta/type_name.hpp>

// Declaring a message (e.g. in actors/messages.hpp):
//
//   struct node_heartbeat {
//     static constexpr std::uint32_t wire_id = 12;   // unique, never reused; 0 is reserved
//     std::string node;
//     std::uint64_t seq = 0;
//     std::optional<double> load;
//   };
//   template <class Inspector>
//   typename Inspector::result_type inspect(Inspector& f, node_heartbeat& x) {
//     return f(caf::meta::type_name("node_heartbeat"), x.node, x.seq, x.load);
//   }
//
// Field types: bool, integers, float/double, std::string, std::vector<T>,
// std::map<std::string, T>, std::optional<T>, enums, and structs with their own inspect. An enum
// on the wire declares its largest value next to it (values are 0..max, contiguous):
//
//   enum class job_state : std::uint8_t { pending, running, succeeded, failed };
//   constexpr job_state wire_enum_max(job_state) { return job_state::failed; }
//
// inspect must make exactly one call `f(...)` (type_name first, then every field in order).

namespace cohort::net {

// The registry: the list of every message type one codec understands.
template <class... Ts>
struct wire_types {};

namespace detail {

template <class E, class = void>
struct has_wire_enum_max : std::false_type {};

template <class E>
struct has_wire_enum_max<E, std::void_t<decltype(wire_enum_max(std::declval<E>()))>>
  : std::true_type {};

template <class A, class... Bs>
constexpr bool agrees_with_each() {
  return ((A::wire_id != Bs::wire_id || std::is_same_v<A, Bs>) && ...);
}

} // namespace detail

// Whether two registries agree where they overlap: every wire id that both use names the same
// message in each (a frame one codec writes is never read as another message by the other).
//   static_assert(net::agreeing_wire_ids(wire_messages{}, link_messages{}), "...");
template <class... As, class... Bs>
constexpr bool agreeing_wire_ids(wire_types<As...>, wire_types<Bs...>) {
  return (detail::agrees_with_each<As, Bs...>() && ...);
}

// The largest valid underlying value of a wire enum.
template <class E>
constexpr std::underlying_type_t<E> enum_max_value() {
  static_assert(detail::has_wire_enum_max<E>::value,
                "a wire enum needs `constexpr E wire_enum_max(E)` declared next to it");
  return static_cast<std::underlying_type_t<E>>(wire_enum_max(E{}));
}

} // namespace cohort::net

// CAF 0.17 knows caf::optional but not std::optional; these overloads (found through ADL on CAF's
// serializer/deserializer) encode a flag and, when set, the value, like CAF does for caf::optional.
namespace caf {

template <class Inspector, class T>
typename std::enable_if<Inspector::reads_state, typename Inspector::result_type>::type
inspect(Inspector& f, std::optional<T>& x) {
  return x ? f(true, *x) : f(false);
}

template <class T>
struct std_optional_inspect_helper {
  bool& enabled;
  T& storage;
  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, std_optional_inspect_helper& x) {
    return x.enabled ? f(x.storage) : f();
  }
};

template <class Inspector, class T>
typename std::enable_if<Inspector::writes_state, typename Inspector::result_type>::type
inspect(Inspector& f, std::optional<T>& x) {
  bool flag = false;
  T tmp{};
  std_optional_inspect_helper<T> helper{flag, tmp};
  auto guard = detail::make_scope_guard([&] {
    if (flag)
      x = std::move(tmp);
    else
      x = std::nullopt;
  });
  return f(flag, helper);
}

} // namespace caf

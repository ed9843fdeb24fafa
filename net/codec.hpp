// The frame codec: one ZeroMQ frame = msgpack [protocol_version, type_id, body], where body is the
// message's inspect field list. Built once from a wire_types<...> registry; immutable afterwards,
// so one codec may be shared by any number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <typeindex>
#include <vector>

#include <caf/message.hpp>
#include <caf/make_message.hpp>
#include <msgpack.hpp>

#include "net/frame_error.hpp"
#include "net/frame_limits.hpp"
#include "net/msgpack_reader.hpp"
#include "net/msgpack_writer.hpp"
#include "net/wire_message.hpp"

namespace cohort::net {

// Sent back to a peer whose frame was refused (always part of every codec, type id 0).
struct wire_error {
  static constexpr std::uint32_t wire_id = 0;
  frame_error reason = frame_error::none;
  std::uint32_t type_id = 0; // the refused frame's type id, when the envelope could be read
  std::string detail;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_error& x) {
  return f(caf::meta::type_name("wire_error"), x.reason, x.type_id, x.detail);
}

// The result of decoding one frame: either a message, or why the frame was refused.
struct decoded_frame {
  frame_error error = frame_error::none;
  std::string detail;
  std::optional<std::uint32_t> type_id; // set once the envelope was readable
  caf::message message;                 // one element: the decoded struct
  bool ok() const { return error == frame_error::none; }
};

namespace detail {

// Captures the caf::meta::type_name of a struct's inspect.
struct type_name_probe {
  using result_type = void;
  static constexpr bool reads_state = true;
  static constexpr bool writes_state = false;
  const char* name = nullptr;
  template <class... Ts>
  void operator()(Ts&&... xs) {
    (capture(xs), ...);
  }
  template <class T>
  void capture(const T& x) {
    if constexpr (std::is_same_v<T, caf::meta::type_name_t>)
      name = x.value;
  }
};

template <std::uint32_t... Ids>
constexpr bool unique_wire_ids() {
  constexpr std::uint32_t ids[] = {Ids...};
  for (std::size_t i = 0; i < sizeof...(Ids); ++i)
    for (std::size_t j = i + 1; j < sizeof...(Ids); ++j)
      if (ids[i] == ids[j])
        return false;
  return true;
}

} // namespace detail

// The name a message's inspect gives in caf::meta::type_name (its C++ type name if none).
template <class T>
const char* wire_type_name() {
  detail::type_name_probe probe;
  T sample{};
  inspect(probe, sample);
  return probe.name ? probe.name : typeid(T).name();
}

class wire_codec {
public:
  template <class... Ts>
  explicit wire_codec(wire_types<Ts...>, frame_limits limits = {}) : limits_(limits) {
    static_assert(detail::unique_wire_ids<wire_error::wire_id, Ts::wire_id...>(),
                  "every wire message needs a unique wire_id; 0 is reserved for wire_error");
    validate(limits_);
    add<wire_error>();
    (add<Ts>(), ...);
    std::sort(entries_.begin(), entries_.end(),
              [](const entry& a, const entry& b) { return a.id < b.id; });
  }

  // The frame for msg. Throws encode_error if T is not registered or the frame would break the
  // limits (a receiver would refuse it).
  template <class T>
  std::string encode(const T& msg) const {
    const entry& e = registered(T::wire_id, typeid(T));
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> out{buf};
    begin(out, T::wire_id);
    msgpack_writer writer{out};
    writer.apply(msg);
    return finish(buf, e);
  }

  // The frame for a caf::message holding exactly one registered struct.
  std::string encode(const caf::message& msg) const;

  // Never throws: a refused frame comes back with error and detail set.
  decoded_frame decode(const void* data, std::size_t size) const noexcept;

  const frame_limits& limits() const noexcept { return limits_; }

  // The registered type's name (from its inspect), or nullptr.
  const char* type_name(std::uint32_t id) const noexcept;

private:
  struct entry {
    std::uint32_t id;
    const char* name;
    std::type_index type;
    caf::message (*decode)(const msgpack::object& body, const field_path& root);
    bool (*encode_message)(const caf::message& msg, msgpack_writer& writer);
  };

  template <class T>
  void add() {
    static_assert(std::is_default_constructible_v<T>, "a wire message must be default-constructible");
    entries_.push_back(
      entry{T::wire_id, wire_type_name<T>(), typeid(T), &decode_as<T>, &encode_as<T>});
  }

  template <class T>
  static caf::message decode_as(const msgpack::object& body, const field_path& root) {
    T x{};
    msgpack_reader::read(body, x, root);
    return caf::make_message(std::move(x));
  }

  template <class T>
  static bool encode_as(const caf::message& msg, msgpack_writer& writer) {
    if (!msg.match_element<T>(0))
      return false;
    writer.apply(msg.get_as<T>(0));
    return true;
  }

  static void begin(msgpack::packer<msgpack::sbuffer>& out, std::uint32_t id);
  const entry* find(std::uint32_t id) const noexcept;
  const entry& registered(std::uint32_t id, const std::type_info& type) const;
  std::string finish(const msgpack::sbuffer& buf, const entry& e) const;

  frame_limits limits_;
  std::vector<entry> entries_; // sorted by id
};

} // namespace cohort::net

// The frame codec: round trips of every field type, and every class of bad frame refused with
// the right reason and no large allocation.
#include <catch2/catch.hpp>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "net/codec.hpp"
#include "tests/net/example_messages.hpp"

using namespace cohort::net;
using namespace cohort::net::test;

namespace {

template <class T>
T decode_as(const wire_codec& codec, const std::string& frame) {
  auto d = codec.decode(frame.data(), frame.size());
  INFO(to_string(d.error) << ": " << d.detail);
  REQUIRE(d.ok());
  REQUIRE(d.message.match_element<T>(0));
  return d.message.get_as<T>(0);
}

// Packs an arbitrary frame with msgpack-c directly (to build frames the codec would never write).
template <class F>
std::string raw(F&& fill) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> out{buf};
  fill(out);
  return std::string(buf.data(), buf.size());
}

// [version, id, body] with a hand-made body.
template <class F>
std::string envelope(std::uint32_t id, F&& body, std::uint32_t version = protocol_version) {
  return raw([&](auto& out) {
    out.pack_array(3);
    out.pack(version);
    out.pack(id);
    body(out);
  });
}

decoded_frame decode(const wire_codec& codec, const std::string& frame) {
  return codec.decode(frame.data(), frame.size());
}

} // namespace

TEST_CASE("every field type survives an encode-decode round trip", "[net][codec]") {
  wire_codec codec{example_types{}};
  everything x = full_example();
  CHECK(decode_as<everything>(codec, codec.encode(x)) == x);
  everything empty;
  CHECK(decode_as<everything>(codec, codec.encode(empty)) == empty);
  ping p{42, "node-1"};
  auto q = decode_as<ping>(codec, codec.encode(p));
  CHECK(q.seq == 42);
  CHECK(q.from == "node-1");
  // Doubles at the edges of msgpack's integer packing (2^64 exactly was undefined behaviour in
  // msgpack-c's pack_double; found by fuzz_frame_decoder).
  for (double d : {18446744073709551616.0, 18446744073709551615.0, -9223372036854775808.0, 1e300, -0.0}) {
    everything e;
    e.f64 = d;
    CHECK(decode_as<everything>(codec, codec.encode(e)).f64 == d);
  }
}

TEST_CASE("the same inspect declaration drives CAF's binary serialization", "[net][codec]") {
  everything x = full_example();
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  REQUIRE(!sink(x));
  everything y;
  caf::binary_deserializer source{nullptr, buf};
  REQUIRE(!source(y));
  CHECK(y == x);
}

TEST_CASE("a caf::message holding a registered struct encodes like the struct", "[net][codec]") {
  wire_codec codec{example_types{}};
  ping p{7, "head"};
  CHECK(codec.encode(caf::make_message(p)) == codec.encode(p));
  CHECK_THROWS_AS(codec.encode(caf::make_message(1, 2)), encode_error);
  CHECK_THROWS_AS(codec.encode(caf::make_message(std::string{"x"})), encode_error);
}

TEST_CASE("the codec reports the type names from inspect", "[net][codec]") {
  wire_codec codec{example_types{}};
  CHECK(std::string{codec.type_name(everything::wire_id)} == "everything");
  CHECK(std::string{codec.type_name(0)} == "wire_error");
  CHECK(codec.type_name(99) == nullptr);
}

TEST_CASE("encoding refuses messages that a receiver would refuse", "[net][codec]") {
  frame_limits limits;
  limits.max_string_bytes = 16;
  wire_codec codec{wire_types<ping>{}, limits};
  CHECK_NOTHROW(codec.encode(ping{1, "short"}));
  CHECK_THROWS_AS(codec.encode(ping{1, std::string(17, 'x')}), encode_error);
  CHECK_THROWS_AS(codec.encode(small{}), encode_error); // not registered with this codec
}

TEST_CASE("frames that are not msgpack, truncated or oversized are refused", "[net][codec]") {
  frame_limits limits;
  limits.max_frame_bytes = 1024;
  wire_codec codec{example_types{}, limits};
  const std::string good = codec.encode(ping{3, "x"});

  CHECK(decode(codec, "").error == frame_error::truncated);
  CHECK(decode(codec, good.substr(0, good.size() - 1)).error == frame_error::truncated);
  CHECK(decode(codec, std::string(1, '\xc1')).error == frame_error::malformed); // never used
  CHECK(decode(codec, good + "\x01").error == frame_error::malformed);         // trailing bytes
  wire_codec roomy{example_types{}};
  auto big = decode(codec, roomy.encode(ping{1, std::string(2000, 'y')}));
  CHECK(big.error == frame_error::oversized);
  CHECK(decode(roomy, roomy.encode(ping{1, std::string(2000, 'y')})).ok());
}

TEST_CASE("a container header claiming 2^32-1 elements is refused before any allocation",
          "[net][codec]") {
  frame_limits limits;
  limits.max_container_elements = UINT32_MAX; // so only the frame-size check can stop it
  wire_codec codec{example_types{}, limits};
  // array32 with 0xffffffff elements, then nothing: msgpack-c alone would reserve 64 GiB.
  const std::string huge_array{"\xdd\xff\xff\xff\xff", 5};
  auto d = decode(codec, huge_array);
  CHECK(d.error == frame_error::truncated);
  CHECK_THAT(d.detail, Catch::Contains("claims 4294967295 elements"));
  // the same inside a valid envelope prefix, and as a map
  auto nested = decode(codec, std::string{"\x93\x01\x02\xdf\xff\xff\xff\xff", 8});
  CHECK(nested.error == frame_error::truncated);
  // Nested claims add up: each level claims what the whole frame could hold.
  std::string stacked;
  for (int i = 0; i < 8; ++i)
    stacked += std::string{"\xdc\x00\x20", 3}; // array16 of 32 elements
  CHECK(decode(codec, stacked).error == frame_error::truncated);
}

TEST_CASE("containers, strings, ext and nesting beyond the limits are refused", "[net][codec]") {
  frame_limits limits;
  limits.max_container_elements = 8;
  limits.max_string_bytes = 10;
  limits.max_depth = 6;
  wire_codec codec{example_types{}, limits};

  auto long_array = raw([](auto& out) {
    out.pack_array(9);
    for (int i = 0; i < 9; ++i)
      out.pack(i);
  });
  CHECK(decode(codec, long_array).error == frame_error::limit_exceeded);
  auto long_map = raw([](auto& out) {
    out.pack_map(9);
    for (int i = 0; i < 9; ++i) {
      out.pack(i);
      out.pack(i);
    }
  });
  CHECK(decode(codec, long_map).error == frame_error::limit_exceeded);
  CHECK(decode(codec, raw([](auto& out) { out.pack(std::string(11, 's')); })).error
        == frame_error::limit_exceeded);
  auto ext = raw([](auto& out) { out.pack_ext(1, 5); out.pack_ext_body("\x01", 1); });
  CHECK(decode(codec, ext).error == frame_error::limit_exceeded);
  auto deep = raw([](auto& out) {
    for (int i = 0; i < 7; ++i)
      out.pack_array(1);
    out.pack(0);
  });
  auto d = decode(codec, deep);
  CHECK(d.error == frame_error::limit_exceeded);
  CHECK_THAT(d.detail, Catch::Contains("nesting"));
}

TEST_CASE("envelopes with the wrong shape, version or type id are refused", "[net][codec]") {
  wire_codec codec{example_types{}};
  CHECK(decode(codec, raw([](auto& out) { out.pack("hello"); })).error == frame_error::bad_envelope);
  CHECK(decode(codec, raw([](auto& out) {
          out.pack_array(2);
          out.pack(1);
          out.pack(2);
        })).error == frame_error::bad_envelope);
  CHECK(decode(codec, raw([](auto& out) {
          out.pack_array(3);
          out.pack("1");
          out.pack(2);
          out.pack_array(0);
        })).error == frame_error::bad_envelope);
  auto ping_body = [](auto& out) {
    out.pack_array(2);
    out.pack(1);
    out.pack("a");
  };
  auto wrong_version = decode(codec, envelope(ping::wire_id, ping_body, protocol_version + 1));
  CHECK(wrong_version.error == frame_error::wrong_version);
  auto unknown = decode(codec, envelope(999, ping_body));
  CHECK(unknown.error == frame_error::unknown_type);
  REQUIRE(unknown.type_id);
  CHECK(*unknown.type_id == 999);
  CHECK(decode(codec, envelope(ping::wire_id, ping_body)).ok());
}

TEST_CASE("bodies with wrong field types, counts or ranges are refused naming the field",
          "[net][codec]") {
  wire_codec codec{example_types{}};
  auto small_body = [](auto port, auto shade) {
    return [=](auto& out) {
      out.pack_array(2);
      out.pack(port);
      out.pack(shade);
    };
  };
  auto check_bad = [&](const std::string& frame, const std::string& mention) {
    auto d = decode(codec, frame);
    CHECK(d.error == frame_error::bad_body);
    CHECK_THAT(d.detail, Catch::Contains(mention));
  };
  check_bad(envelope(small::wire_id, small_body(70000, 1)), "small.field[0]");
  check_bad(envelope(small::wire_id, small_body(-1, 1)), "negative integer");
  check_bad(envelope(small::wire_id, small_body(80, 3)), "small.field[1]: expected an integer in [0, 2]");
  check_bad(envelope(small::wire_id, small_body("80", 1)), "got string");
  check_bad(envelope(small::wire_id, small_body(1.5, 1)), "got float");
  check_bad(envelope(small::wire_id, [](auto& out) {
              out.pack_array(3);
              out.pack(1);
              out.pack(1);
              out.pack(1);
            }),
            "expected 2 fields, got 3");
  check_bad(envelope(small::wire_id, [](auto& out) { out.pack_nil(); }), "got nil");
  CHECK(decode(codec, envelope(small::wire_id, small_body(80, 2))).ok());

  // Inside containers: a map with a duplicate key, a non-string key, a bad nested struct.
  everything x;
  auto with_weights = [&](auto fill) {
    std::string frame = codec.encode(x);
    // Rebuild the frame with field 15 (weights) replaced.
    msgpack::object_handle h = msgpack::unpack(frame.data(), frame.size());
    return raw([&](auto& out) {
      out.pack_array(3);
      out.pack(protocol_version);
      out.pack(everything::wire_id);
      const auto& body = h.get().via.array.ptr[2].via.array;
      out.pack_array(body.size);
      for (std::uint32_t i = 0; i < body.size; ++i) {
        if (i == 15)
          fill(out);
        else
          out.pack(body.ptr[i]);
      }
    });
  };
  check_bad(with_weights([](auto& out) {
              out.pack_map(2);
              out.pack("a");
              out.pack(1.0);
              out.pack("a");
              out.pack(2.0);
            }),
            "duplicate map key");
  check_bad(with_weights([](auto& out) {
              out.pack_map(1);
              out.pack(5);
              out.pack(1.0);
            }),
            "expected a string");
  check_bad(with_weights([](auto& out) {
              out.pack_map(1);
              out.pack("gpu");
              out.pack("many");
            }),
            "everything.field[15][\"gpu\"]: expected a number");
  CHECK(decode(codec, with_weights([](auto& out) { out.pack_map(0); })).ok());
}

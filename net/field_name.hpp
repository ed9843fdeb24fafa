// Field names for a message's inspect field list: each field is preceded by its name, so the one
// list that drives CAF and the msgpack wire also drives the JSON views (net/json_inspector.hpp).
// CAF's inspectors and the msgpack reader/writer skip these annotations. Header only.
//
//   return f(caf::meta::type_name("job_record"), net::field("id"), x.id,
//            net::field_or_default("preemptions"), x.preemptions,
//            net::wire_only("spec_json"), x.spec_json);
#pragma once

#include <cstdint>

#include <caf/meta/annotation.hpp>

namespace cohort::net {

// How a field appears in JSON views.
enum class field_presence : std::uint8_t {
  required,    // always written; reading JSON without it fails naming the field
  defaulted,   // always written; absent (JSON of an older version), it reads as its default value
  wire_only,   // not part of JSON views: neither written nor read
};

struct field_name_t : caf::meta::annotation {
  constexpr field_name_t(const char* n, field_presence p) : name(n), presence(p) {}
  const char* name;
  field_presence presence;
};

// The name of the field that follows.
constexpr field_name_t field(const char* name) { return {name, field_presence::required}; }
// A field that JSON written by earlier versions may lack: absent, it keeps its default value.
constexpr field_name_t field_or_default(const char* name) {
  return {name, field_presence::defaulted};
}
// A field of the wire that JSON views leave out.
constexpr field_name_t wire_only(const char* name) { return {name, field_presence::wire_only}; }

}  // namespace cohort::net

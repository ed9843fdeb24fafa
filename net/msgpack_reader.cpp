// The inspector that fills a message from msgpack, checking every field (see msgpack_reader.hpp).
#include "net/msgpack_reader.hpp"

#include <vector>

namespace cohort::net {

std::string field_path::str() const {
  std::vector<const field_path*> links;
  for (const field_path* p = this; p != nullptr && p->parent != nullptr; p = p->parent)
    links.push_back(p);
  std::string out;
  for (auto it = links.rbegin(); it != links.rend(); ++it) {
    const field_path& p = **it;
    if (p.type_name != nullptr) {
      if (!out.empty())
        out += " > ";
      out += p.type_name;
      out += p.field_name != nullptr ? std::string(".") + p.field_name
                                     : ".field[" + std::to_string(p.index) + "]";
    } else if (p.key != nullptr) {
      out += "[\"" + p.key->substr(0, 64) + "\"]";
    } else {
      out += "[" + std::to_string(p.index) + "]";
    }
  }
  return out.empty() ? std::string{"body"} : out;
}

const char* msgpack_type_name(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return "nil";
    case msgpack::type::BOOLEAN: return "boolean";
    case msgpack::type::POSITIVE_INTEGER: return "unsigned integer";
    case msgpack::type::NEGATIVE_INTEGER: return "negative integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return "float";
    case msgpack::type::STR: return "string";
    case msgpack::type::BIN: return "bin";
    case msgpack::type::EXT: return "ext";
    case msgpack::type::ARRAY: return "array";
    case msgpack::type::MAP: return "map";
  }
  return "unknown";
}

void msgpack_reader::fail(const field_path& at, const std::string& what,
                          const msgpack::object& got) {
  std::string value;
  if (got.type == msgpack::type::POSITIVE_INTEGER)
    value = " " + std::to_string(got.via.u64);
  else if (got.type == msgpack::type::NEGATIVE_INTEGER)
    value = " " + std::to_string(got.via.i64);
  else if (got.type == msgpack::type::ARRAY)
    value = " of " + std::to_string(got.via.array.size);
  throw body_error(at.str() + ": " + what + ", got " + msgpack_type_name(got) + value);
}

} // namespace cohort::net

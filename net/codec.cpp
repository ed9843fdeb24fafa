// The frame codec: msgpack [protocol_version, type_id, body] per ZeroMQ frame (see codec.hpp).
#include "net/codec.hpp"

#include <new>

#include "net/frame_check.hpp"

namespace cohort::net {

void wire_codec::begin(msgpack::packer<msgpack::sbuffer>& out, std::uint32_t id) {
  out.pack_array(3);
  out.pack_uint32(protocol_version);
  out.pack_uint32(id);
}

const wire_codec::entry* wire_codec::find(std::uint32_t id) const noexcept {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                             [](const entry& e, std::uint32_t x) { return e.id < x; });
  return it != entries_.end() && it->id == id ? &*it : nullptr;
}

const wire_codec::entry& wire_codec::registered(std::uint32_t id,
                                                const std::type_info& type) const {
  const entry* e = find(id);
  if (e == nullptr || e->type != std::type_index{type})
    throw encode_error(std::string{"cannot encode "} + type.name() + " (wire_id "
                       + std::to_string(id) + "): it is not in this codec's wire_types");
  return *e;
}

std::string wire_codec::finish(const msgpack::sbuffer& buf, const entry& e) const {
  auto check = check_frame(buf.data(), buf.size(), limits_);
  if (check.error != frame_error::none)
    throw encode_error(std::string{"cannot send "} + e.name + ": the frame would be refused ("
                       + to_string(check.error) + ": " + check.detail + ")");
  return std::string(buf.data(), buf.size());
}

std::string wire_codec::encode(const caf::message& msg) const {
  if (msg.size() != 1)
    throw encode_error("cannot encode a caf::message of " + std::to_string(msg.size())
                       + " elements: a wire message is exactly one registered struct");
  for (const entry& e : entries_) {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> out{buf};
    begin(out, e.id);
    msgpack_writer writer{out};
    if (e.encode_message(msg, writer))
      return finish(buf, e);
  }
  throw encode_error("cannot encode a caf::message holding " + to_string(msg)
                     + ": its type is not in this codec's wire_types");
}

const char* wire_codec::type_name(std::uint32_t id) const noexcept {
  const entry* e = find(id);
  return e ? e->name : nullptr;
}

decoded_frame wire_codec::decode(const void* data, std::size_t size) const noexcept {
  decoded_frame out;
  auto refuse = [&out](frame_error e, std::string detail) -> decoded_frame {
    out.error = e;
    out.detail = std::move(detail);
    out.message = caf::message{};
    return std::move(out);
  };
  try {
    const char* bytes = static_cast<const char*>(data);
    auto check = check_frame(bytes, size, limits_);
    if (check.error != frame_error::none)
      return refuse(check.error, std::move(check.detail));
    msgpack::object_handle handle;
    try {
      std::size_t off = 0;
      bool referenced = false;
      // Strings may point into the frame: they are copied before decode returns.
      auto reference_all = [](msgpack::type::object_type, std::size_t, void*) { return true; };
      msgpack::unpack_limit limit{limits_.max_container_elements, limits_.max_container_elements,
                                  limits_.max_string_bytes,       limits_.max_bin_bytes,
                                  limits_.max_ext_bytes,          limits_.max_depth + 1};
      handle = msgpack::unpack(bytes, size, off, referenced, reference_all, nullptr, limit);
    } catch (const msgpack::insufficient_bytes& e) {
      return refuse(frame_error::truncated, e.what());
    } catch (const msgpack::size_overflow& e) {
      return refuse(frame_error::limit_exceeded, e.what());
    } catch (const std::bad_alloc&) {
      return refuse(frame_error::limit_exceeded, "out of memory while unpacking");
    } catch (const std::exception& e) {
      return refuse(frame_error::malformed, e.what());
    }
    const msgpack::object& root = handle.get();
    if (root.type != msgpack::type::ARRAY || root.via.array.size != 3)
      return refuse(frame_error::bad_envelope,
                    std::string{"expected [version, type_id, body], got "}
                      + msgpack_type_name(root));
    const msgpack::object& version = root.via.array.ptr[0];
    const msgpack::object& id = root.via.array.ptr[1];
    if (version.type != msgpack::type::POSITIVE_INTEGER || id.type != msgpack::type::POSITIVE_INTEGER
        || id.via.u64 > UINT32_MAX)
      return refuse(frame_error::bad_envelope,
                    "envelope version and type_id must be unsigned 32-bit integers");
    if (version.via.u64 != protocol_version)
      return refuse(frame_error::wrong_version,
                    "protocol version " + std::to_string(version.via.u64) + ", expected "
                      + std::to_string(protocol_version));
    out.type_id = static_cast<std::uint32_t>(id.via.u64);
    const entry* e = find(*out.type_id);
    if (e == nullptr)
      return refuse(frame_error::unknown_type,
                    "unknown message type id " + std::to_string(*out.type_id));
    try {
      field_path root_path{};
      out.message = e->decode(root.via.array.ptr[2], root_path);
    } catch (const body_error& err) {
      return refuse(frame_error::bad_body, std::string{e->name} + ": " + err.what());
    }
    return out;
  } catch (const std::exception& e) {
    return refuse(frame_error::bad_body, std::string{"decoding failed: "} + e.what());
  } catch (...) {
    return refuse(frame_error::malformed, "decoding failed");
  }
}

} // namespace cohort::net

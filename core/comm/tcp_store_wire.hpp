// The TCP store's wire format, shared by tcp_store (client) and tcp_store_server. Internal to
// core/comm. Every frame is u32 little-endian length + body.
//
// Connect (challenge-response; nothing else is read from a client until it succeeds):
//   server -> client  hello:  u8 protocol_version | 32-byte server nonce              (unsealed)
//   client -> server  auth:   32-byte client nonce | HMAC-SHA256(secret, "cohort-store client"
//                             | server nonce | client nonce)                            (unsealed)
//   server -> client  sealed frame 0 with payload u8 status::ok: proves the server holds the
//                     secret too. A wrong proof is refused: the server closes the connection.
// After that every frame in either direction is sealed: body = payload | 32-byte tag, tag =
// HMAC-SHA256(session key, direction byte | u64 sequence number | payload), where the session
// key = HMAC-SHA256(secret, "cohort-store session" | server nonce | client nonce) and each
// direction numbers its frames 0, 1, 2, ... (never sent: a replayed, reordered, dropped or
// altered frame fails its tag, and nonces make a frame of one connection useless on another).
//
// Sealed payloads: a request is u8 op + fields, a reply u8 status + fields; strings are u32
// length + bytes. Decoding never throws and never allocates past a bound checked first.
#pragma once

#include "core/comm/store.hpp"
#include "core/comm/store_auth.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace cohort::core::comm::wire {

enum class op : std::uint8_t { set = 1, get = 2, add = 3, check = 4, remove = 5 };
enum class status : std::uint8_t { ok = 0, timeout = 1, error = 2 };

inline constexpr std::uint8_t protocol_version = 2;
inline constexpr std::size_t nonce_bytes = 32;
inline constexpr std::size_t tag_bytes = 32;
inline constexpr std::size_t hello_bytes = 1 + nonce_bytes;
inline constexpr std::size_t auth_bytes = nonce_bytes + tag_bytes;
inline constexpr std::size_t max_check_keys = 1024;
// Largest sealed body either side accepts: a SET of the largest key and value, or a CHECK of
// max_check_keys keys, plus headers and the tag. A length above it is refused before any byte
// of the body is buffered.
inline constexpr std::size_t max_frame_bytes =
    max_store_value_bytes + max_check_keys * (max_store_key_bytes + 4) + 64 + tag_bytes;

inline void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
inline void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_str(std::string& out, const std::string& s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out += s;
}
// Prefixes body with its length (for the unsealed handshake frames).
inline std::string frame(const std::string& body) {
  std::string out;
  out.reserve(body.size() + 4);
  put_u32(out, static_cast<std::uint32_t>(body.size()));
  out += body;
  return out;
}
inline std::uint32_t read_u32_at(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Why a payload could not be decoded.
enum class decode_error : std::uint8_t {
  none,
  truncated,       // a field runs past the end of the payload
  trailing_bytes,  // bytes left after the last field
  unknown_op,
  empty_key,
  key_too_long,    // over max_store_key_bytes
  value_too_long,  // over max_store_value_bytes
  too_many_keys,   // a CHECK of more than max_check_keys keys
};
inline const char* to_string(decode_error e) {
  switch (e) {
    case decode_error::none: return "none";
    case decode_error::truncated: return "a field runs past the end of the frame";
    case decode_error::trailing_bytes: return "bytes after the last field";
    case decode_error::unknown_op: return "unknown operation";
    case decode_error::empty_key: return "empty key";
    case decode_error::key_too_long: return "key longer than max_store_key_bytes";
    case decode_error::value_too_long: return "value longer than max_store_value_bytes";
    case decode_error::too_many_keys: return "more keys than max_check_keys";
  }
  return "unknown decode error";
}

// Reads fields from one payload; the first failure is kept in error() and every later read
// returns a zero value. A string's length is checked against its bound and against the bytes
// left before anything is allocated.
class reader {
 public:
  reader(const char* data, std::size_t size) noexcept : data_(data), size_(size) {}
  bool ok() const noexcept { return error_ == decode_error::none; }
  decode_error error() const noexcept { return error_; }
  bool at_end() const noexcept { return pos_ == size_; }
  std::uint8_t u8() noexcept {
    if (!need(1)) return 0;
    return static_cast<std::uint8_t>(data_[pos_++]);
  }
  std::uint32_t u32() noexcept {
    if (!need(4)) return 0;
    const auto v = read_u32_at(data_ + pos_);
    pos_ += 4;
    return v;
  }
  std::uint64_t u64() noexcept {
    if (!need(8)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= std::uint64_t(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  std::string str(std::size_t max_bytes, decode_error too_long = decode_error::truncated) noexcept {
    const std::uint32_t n = u32();
    if (!ok()) return {};
    if (n > max_bytes) {
      fail(too_long);
      return {};
    }
    if (!need(n)) return {};
    std::string s(data_ + pos_, n);
    pos_ += n;
    return s;
  }
  void fail(decode_error e) noexcept {
    if (ok()) error_ = e;
  }
  // Records trailing_bytes unless the payload was read to its end.
  void finish() noexcept {
    if (ok() && !at_end()) error_ = decode_error::trailing_bytes;
  }

 private:
  bool need(std::size_t n) noexcept {
    if (ok() && size_ - pos_ < n) error_ = decode_error::truncated;
    return ok();
  }
  const char* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  decode_error error_ = decode_error::none;
};

// One decoded request; which fields are set depends on kind.
struct request {
  op kind = op::get;
  std::string key;                // set, get, add, remove
  std::string value;              // set
  std::uint64_t timeout_ms = 0;   // get
  std::int64_t delta = 0;         // add
  std::vector<std::string> keys;  // check
};

// Decodes a request payload into out; returns why it is malformed (none when it is not).
inline decode_error decode_request(const char* data, std::size_t size, request& out) noexcept {
  reader r(data, size);
  const std::uint8_t kind = r.u8();
  if (!r.ok()) return r.error();
  const auto key = [&] {
    std::string k = r.str(max_store_key_bytes, decode_error::key_too_long);
    if (r.ok() && k.empty()) r.fail(decode_error::empty_key);
    return k;
  };
  switch (static_cast<op>(kind)) {
    case op::set:
      out.kind = op::set;
      out.key = key();
      out.value = r.str(max_store_value_bytes, decode_error::value_too_long);
      break;
    case op::get:
      out.kind = op::get;
      out.key = key();
      out.timeout_ms = r.u64();
      break;
    case op::add:
      out.kind = op::add;
      out.key = key();
      out.delta = static_cast<std::int64_t>(r.u64());
      break;
    case op::check: {
      out.kind = op::check;
      const std::uint32_t n = r.u32();
      if (r.ok() && n > max_check_keys) r.fail(decode_error::too_many_keys);
      if (!r.ok()) break;
      out.keys.clear();
      out.keys.reserve(n);
      for (std::uint32_t i = 0; i < n && r.ok(); ++i) out.keys.push_back(key());
      break;
    }
    case op::remove:
      out.kind = op::remove;
      out.key = key();
      break;
    default:
      return decode_error::unknown_op;
  }
  r.finish();
  return r.error();
}

// Cryptography of the handshake and of sealed frames (libsodium; store_auth.cpp).

// Fills out with nonce_bytes random bytes.
void random_nonce(unsigned char* out);
// The client's proof: HMAC-SHA256(secret, "cohort-store client" | server_nonce | client_nonce).
void client_proof(const std::string& secret, const unsigned char* server_nonce,
                  const unsigned char* client_nonce, unsigned char* out);
// Whether proof is the client's proof for these nonces (compared in constant time).
bool check_client_proof(const std::string& secret, const unsigned char* server_nonce,
                        const unsigned char* client_nonce, const unsigned char* proof) noexcept;

// One side of an authenticated connection: seals what it sends and opens what it receives, each
// direction with its own sequence number. Used by one thread at a time (its connection's).
class session {
 public:
  enum class side { client, server };
  session(const std::string& secret, const unsigned char* server_nonce,
          const unsigned char* client_nonce, side me);
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;
  session(session&&) noexcept;
  session& operator=(session&&) noexcept;

  // The whole frame for payload: length | payload | tag. Advances the send sequence number.
  std::string seal(const std::string& payload);
  // Checks a received frame body (payload | tag, `size` bytes as its length said). True when
  // the tag is right for the next receive sequence number (then advanced); the payload is the
  // first size - tag_bytes bytes. False for a body shorter than a tag or a wrong tag.
  bool open(const char* body, std::size_t size) noexcept;

 private:
  unsigned char key_[32];
  std::uint8_t send_direction_;
  std::uint8_t receive_direction_;
  std::uint64_t send_seq_ = 0;
  std::uint64_t receive_seq_ = 0;
};

}  // namespace cohort::core::comm::wire

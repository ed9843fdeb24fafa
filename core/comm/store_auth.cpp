// The store secret and the cryptography of the TCP store's handshake and sealed frames
// (HMAC-SHA256 from libsodium).
#include "core/comm/store_auth.hpp"

#include "core/comm/comm_error.hpp"
#include "core/comm/tcp_store_wire.hpp"

#include <sodium.h>

namespace cohort::core::comm {
namespace {

void init_sodium() {
  if (::sodium_init() < 0)
    throw comm_error(comm_errc::backend_failure, "libsodium cannot be initialised (sodium_init failed)");
}

constexpr char client_label[] = "cohort-store client";
constexpr char session_label[] = "cohort-store session";
const std::string pair_label = "cohort pair";

// HMAC-SHA256(key, label | a | b), a and b of wire::nonce_bytes each.
void hmac_of(const unsigned char* key, std::size_t key_bytes, const char* label, std::size_t label_bytes,
             const unsigned char* a, const unsigned char* b, unsigned char* out) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key, key_bytes);
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label), label_bytes);
  crypto_auth_hmacsha256_update(&st, a, wire::nonce_bytes);
  crypto_auth_hmacsha256_update(&st, b, wire::nonce_bytes);
  crypto_auth_hmacsha256_final(&st, out);
  ::sodium_memzero(&st, sizeof st);
}

const unsigned char* bytes_of(const std::string& s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

// The tag of payload as the seq-th frame in direction dir.
void tag_of(const unsigned char* key, std::uint8_t dir, std::uint64_t seq, const char* payload,
            std::size_t size, unsigned char* out) {
  unsigned char head[9];
  head[0] = dir;
  for (int i = 0; i < 8; ++i) head[1 + i] = static_cast<unsigned char>((seq >> (8 * i)) & 0xff);
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key, 32);
  crypto_auth_hmacsha256_update(&st, head, sizeof head);
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(payload), size);
  crypto_auth_hmacsha256_final(&st, out);
  ::sodium_memzero(&st, sizeof st);
}

}  // namespace

std::string make_store_secret() {
  init_sodium();
  std::string secret(store_secret_bytes, '\0');
  ::randombytes_buf(secret.data(), secret.size());
  return secret;
}

void validate_store_secret(const std::string& secret, const std::string& where) {
  if (secret.size() != store_secret_bytes)
    throw comm_error(comm_errc::invalid_argument,
                     where + ": the store secret must have " + std::to_string(store_secret_bytes) +
                         " bytes, got " + std::to_string(secret.size()));
}

std::string make_pair_challenge() {
  init_sodium();
  std::string challenge(pair_challenge_bytes, '\0');
  ::randombytes_buf(challenge.data(), challenge.size());
  return challenge;
}

std::string pair_proof(const std::string& secret, const std::string& group, int from_rank, int to_rank,
                       const std::string& challenge) {
  validate_store_secret(secret, "pair_proof");
  const std::string ranks = std::to_string(from_rank) + ">" + std::to_string(to_rank);
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, bytes_of(secret), secret.size());
  for (const std::string* part : {&pair_label, &group, &ranks, &challenge}) {
    const auto size = static_cast<std::uint64_t>(part->size());
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((size >> (8 * i)) & 0xff);
    crypto_auth_hmacsha256_update(&st, length, sizeof length);  // parts cannot run into each other
    crypto_auth_hmacsha256_update(&st, bytes_of(*part), part->size());
  }
  std::string out(pair_proof_bytes, '\0');
  crypto_auth_hmacsha256_final(&st, reinterpret_cast<unsigned char*>(out.data()));
  ::sodium_memzero(&st, sizeof st);
  return out;
}

bool check_pair_proof(const std::string& secret, const std::string& group, int from_rank, int to_rank,
                      const std::string& challenge, const std::string& proof) noexcept {
  if (proof.size() != pair_proof_bytes || secret.size() != store_secret_bytes) return false;
  try {
    auto want = pair_proof(secret, group, from_rank, to_rank, challenge);
    const bool ok = ::sodium_memcmp(want.data(), proof.data(), pair_proof_bytes) == 0;  // constant time
    ::sodium_memzero(want.data(), want.size());
    return ok;
  } catch (...) {
    return false;
  }
}

std::string store_secret_to_hex(const std::string& secret) {
  validate_store_secret(secret, "store_secret_to_hex");
  std::string hex(2 * secret.size() + 1, '\0');
  ::sodium_bin2hex(hex.data(), hex.size(), bytes_of(secret), secret.size());
  hex.pop_back();
  return hex;
}

std::string store_secret_from_hex(const std::string& hex, const std::string& where) {
  std::string secret(store_secret_bytes, '\0');
  std::size_t got = 0;
  const char* end = nullptr;
  if (hex.size() != 2 * store_secret_bytes ||
      ::sodium_hex2bin(reinterpret_cast<unsigned char*>(secret.data()), secret.size(), hex.data(),
                       hex.size(), nullptr, &got, &end) != 0 ||
      got != store_secret_bytes || end != hex.data() + hex.size())
    throw comm_error(comm_errc::invalid_argument,
                     where + ": the store secret must be " + std::to_string(2 * store_secret_bytes) +
                         " hex digits (got " + std::to_string(hex.size()) + " characters)");
  return secret;
}

namespace wire {

void random_nonce(unsigned char* out) {
  init_sodium();
  ::randombytes_buf(out, nonce_bytes);
}

void client_proof(const std::string& secret, const unsigned char* server_nonce,
                  const unsigned char* client_nonce, unsigned char* out) {
  hmac_of(bytes_of(secret), secret.size(), client_label, sizeof client_label - 1, server_nonce,
          client_nonce, out);
}

bool check_client_proof(const std::string& secret, const unsigned char* server_nonce,
                        const unsigned char* client_nonce, const unsigned char* proof) noexcept {
  unsigned char want[tag_bytes];
  hmac_of(bytes_of(secret), secret.size(), client_label, sizeof client_label - 1, server_nonce,
          client_nonce, want);
  const bool ok = ::sodium_memcmp(want, proof, tag_bytes) == 0;  // constant time
  ::sodium_memzero(want, sizeof want);
  return ok;
}

session::session(const std::string& secret, const unsigned char* server_nonce,
                 const unsigned char* client_nonce, side me)
    : send_direction_(me == side::client ? 'C' : 'S'),
      receive_direction_(me == side::client ? 'S' : 'C') {
  validate_store_secret(secret, "tcp store session");
  hmac_of(bytes_of(secret), secret.size(), session_label, sizeof session_label - 1, server_nonce,
          client_nonce, key_);
}

session::~session() { ::sodium_memzero(key_, sizeof key_); }
session::session(session&&) noexcept = default;
session& session::operator=(session&&) noexcept = default;

std::string session::seal(const std::string& payload) {
  std::string out;
  out.reserve(4 + payload.size() + tag_bytes);
  put_u32(out, static_cast<std::uint32_t>(payload.size() + tag_bytes));
  out += payload;
  unsigned char tag[tag_bytes];
  tag_of(key_, send_direction_, send_seq_++, payload.data(), payload.size(), tag);
  out.append(reinterpret_cast<const char*>(tag), tag_bytes);
  return out;
}

bool session::open(const char* body, std::size_t size) noexcept {
  if (size < tag_bytes) return false;
  unsigned char want[tag_bytes];
  tag_of(key_, receive_direction_, receive_seq_, body, size - tag_bytes, want);
  if (::sodium_memcmp(want, body + size - tag_bytes, tag_bytes) != 0) return false;
  ++receive_seq_;
  return true;
}

}  // namespace wire
}  // namespace cohort::core::comm

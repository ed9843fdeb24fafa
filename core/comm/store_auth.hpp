// The shared secret that admits a client to a tcp_store_server: 32 random bytes made per job
// attempt by the trainer, which serves the store with it and hands it to that attempt's workers
// only over the CURVE-authenticated cluster channel (and, for a worker process, its 0600 setup
// file). A client proves it holds the secret at connect (challenge-response) and MACs every
// frame with a key derived from it; see tcp_store_wire.hpp. Secrets travel as hex text.
#pragma once

#include <cstddef>
#include <string>

namespace cohort::core::comm {

inline constexpr std::size_t store_secret_bytes = 32;

// A fresh secret from the system's CSPRNG (libsodium). Throws comm_error (backend_failure) if
// libsodium cannot be initialised.
std::string make_store_secret();

// 64 lowercase hex digits of a secret of store_secret_bytes bytes, and back. from_hex throws
// comm_error (invalid_argument) naming `where` and the expected form (the secret itself is never
// put in a message).
std::string store_secret_to_hex(const std::string& secret);
std::string store_secret_from_hex(const std::string& hex, const std::string& where);

// Throws comm_error (invalid_argument) naming `where` unless secret has store_secret_bytes bytes.
void validate_store_secret(const std::string& secret, const std::string& where);

// Proofs that the two ends of one connection between ranks (a Gloo pair) belong to the same
// attempt: each end sends the other a fresh challenge (pair_challenge_bytes random bytes,
// make_pair_challenge) and answers the one it got with pair_proof: HMAC-SHA256 under the
// attempt's secret of the group's name, the answering rank, the asking rank and the challenge. A
// peer without the secret cannot answer; an answer seen on the wire serves no other challenge.
inline constexpr std::size_t pair_challenge_bytes = 32;
inline constexpr std::size_t pair_proof_bytes = 32;
std::string make_pair_challenge();
std::string pair_proof(const std::string& secret, const std::string& group, int from_rank, int to_rank,
                       const std::string& challenge);
// Whether `proof` is pair_proof(secret, group, from_rank, to_rank, challenge) (constant time).
bool check_pair_proof(const std::string& secret, const std::string& group, int from_rank, int to_rank,
                      const std::string& challenge, const std::string& proof) noexcept;

}  // namespace cohort::core::comm

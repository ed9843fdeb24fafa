// CURVE keys (Z85 text, 40 characters) and the socket settings that make every connection
// encrypted and authenticated: servers require a ZAP verdict for every client key.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <zmq.hpp>

namespace cohort::net {

// The ZAP domain every cohort server socket uses.
inline constexpr const char* zap_domain = "cohort";

struct curve_keypair {
  std::string public_key; // Z85, 40 characters
  std::string secret_key; // Z85, 40 characters
};

// A fresh keypair from libzmq (libsodium underneath). Throws net_error if libzmq lacks CURVE.
curve_keypair generate_curve_keypair();

// True when text is a 40-character Z85 string that decodes to 32 bytes.
bool is_z85_key(const std::string& text);

// The 32 raw bytes of a Z85 key. Throws credentials_error naming `what` if it is not one.
std::array<std::uint8_t, 32> decode_z85_key(const std::string& text, const std::string& what);

// The Z85 text of 32 raw key bytes.
std::string encode_z85_key(const std::uint8_t* raw32);

// Throws credentials_error (naming `what`) unless both keys are valid and the secret key belongs to
// the public key.
void check_keypair(const curve_keypair& keys, const std::string& what);

// Server side: CURVE server with this keypair, ZAP domain `zap_domain`, and ZAP enforced so that a
// missing handler refuses every client instead of admitting it.
void configure_curve_server(zmq::socket_t& socket, const curve_keypair& server_keys);

// Client side: CURVE client of the server with this public key.
void configure_curve_client(zmq::socket_t& socket, const std::string& server_public_key,
                            const curve_keypair& client_keys);

} // namespace cohort::net

// CURVE keys (Z85 text) and the socket settings that encrypt every connection (see curve.hpp).
#include "net/curve.hpp"

#include <cerrno>
#include <cstring>

#include <sodium.h>

#include "net/net_error.hpp"

namespace cohort::net {

namespace {

// ZMQ_ZAP_ENFORCE_DOMAIN is a draft option in libzmq 4.3: its header hides it, the library
// honours it. Without it, libzmq admits CURVE clients when no ZAP handler answers.
constexpr int zmq_zap_enforce_domain = 93;

} // namespace

curve_keypair generate_curve_keypair() {
  char pub[41] = {};
  char sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    throw net_error(std::string{"cannot generate a CURVE keypair: "} + zmq_strerror(zmq_errno())
                    + " (libzmq must be built with CURVE/libsodium)");
  curve_keypair keys{pub, sec};
  sodium_memzero(sec, sizeof sec);
  return keys;
}

bool is_z85_key(const std::string& text) {
  if (text.size() != 40)
    return false;
  std::uint8_t raw[32];
  return zmq_z85_decode(raw, text.c_str()) != nullptr;
}

std::array<std::uint8_t, 32> decode_z85_key(const std::string& text, const std::string& what) {
  std::array<std::uint8_t, 32> raw{};
  if (text.size() != 40 || zmq_z85_decode(raw.data(), text.c_str()) == nullptr)
    throw credentials_error(what + " must be a 40-character Z85 CURVE key, got "
                            + std::to_string(text.size()) + " characters");
  return raw;
}

std::string encode_z85_key(const std::uint8_t* raw32) {
  char text[41] = {};
  zmq_z85_encode(text, raw32, 32);
  return text;
}

void check_keypair(const curve_keypair& keys, const std::string& what) {
  decode_z85_key(keys.public_key, what + " public key");
  decode_z85_key(keys.secret_key, what + " secret key");
  char derived[41] = {};
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0)
    throw credentials_error("cannot check " + what + ": " + zmq_strerror(zmq_errno()));
  if (keys.public_key != derived)
    throw credentials_error(what + ": the secret key does not belong to the public key");
}

void configure_curve_server(zmq::socket_t& socket, const curve_keypair& server_keys) {
  check_keypair(server_keys, "the server keypair");
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, server_keys.secret_key);
  socket.set(zmq::sockopt::curve_publickey, server_keys.public_key);
  socket.set(zmq::sockopt::zap_domain, zap_domain);
  int enforce = 1;
  if (zmq_setsockopt(socket.handle(), zmq_zap_enforce_domain, &enforce, sizeof enforce) != 0)
    throw net_error(std::string{"this libzmq refuses ZMQ_ZAP_ENFORCE_DOMAIN ("}
                    + zmq_strerror(zmq_errno())
                    + "); cohort needs libzmq >= 4.3 so that clients are refused when no ZAP "
                      "handler answers");
}

void configure_curve_client(zmq::socket_t& socket, const std::string& server_public_key,
                            const curve_keypair& client_keys) {
  decode_z85_key(server_public_key, "the server public key");
  check_keypair(client_keys, "the client keypair");
  socket.set(zmq::sockopt::curve_serverkey, server_public_key);
  socket.set(zmq::sockopt::curve_publickey, client_keys.public_key);
  socket.set(zmq::sockopt::curve_secretkey, client_keys.secret_key);
}

} // namespace cohort::net

// libFuzzer target for the rendezvous store's wire (core/comm/tcp_store_wire.hpp), as a server
// meets it: any bytes must be refused or decoded without a crash, past the handshake and past the
// frame's MAC. The input's first byte picks the path:
//   0: the bytes as a request payload behind a valid MAC (what a client holding the secret, or a
//      bug in ours, can send): decode_request must decode it or name why not;
//   1: the bytes as a sealed frame body from a client without the secret: open() must refuse it;
//   2: the bytes as a client's handshake proof: check_client_proof must refuse it.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/comm/tcp_store_wire.hpp"

using namespace cohort::core::comm;

namespace {

const std::string& secret() {
  static const std::string s(store_secret_bytes, '\x5a');
  return s;
}
const unsigned char server_nonce[wire::nonce_bytes] = {1, 2, 3};
const unsigned char client_nonce[wire::nonce_bytes] = {4, 5, 6};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const char* body = reinterpret_cast<const char*>(data + 1);
  const std::size_t n = size - 1;
  switch (data[0] % 3) {
    case 0: {
      wire::session client(secret(), server_nonce, client_nonce, wire::session::side::client);
      wire::session server(secret(), server_nonce, client_nonce, wire::session::side::server);
      const std::string sealed = client.seal(std::string(body, n));
      const std::size_t length = wire::read_u32_at(sealed.data());
      if (length != sealed.size() - 4 || !server.open(sealed.data() + 4, length)) std::abort();
      wire::request r;
      const wire::decode_error e = wire::decode_request(sealed.data() + 4, length - wire::tag_bytes, r);
      if (e != wire::decode_error::none) {
        if (std::string(wire::to_string(e)).empty()) std::abort();
        return 0;
      }
      if (r.key.size() > max_store_key_bytes || r.value.size() > max_store_value_bytes ||
          r.keys.size() > wire::max_check_keys)
        std::abort();  // decoded past a bound
      return 0;
    }
    case 1: {
      wire::session server(secret(), server_nonce, client_nonce, wire::session::side::server);
      if (server.open(body, n)) std::abort();  // forged without the key
      return 0;
    }
    default: {
      if (n < wire::auth_bytes) return 0;
      const auto* p = reinterpret_cast<const unsigned char*>(body);
      if (wire::check_client_proof(secret(), server_nonce, p, p + wire::nonce_bytes)) std::abort();
      return 0;
    }
  }
}

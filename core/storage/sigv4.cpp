// AWS Signature Version 4: canonical request, string to sign, signing key and Authorization header.
#include "core/storage/sigv4.hpp"

#include <sodium.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace cohort::core::storage {
namespace {

std::string to_hex(const unsigned char* bytes, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::string sha256_hex(const void* data, std::size_t size) {
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, static_cast<const unsigned char*>(data), size);
  return to_hex(digest, sizeof digest);
}

std::string hmac_sha256(const std::string& key, const std::string& message) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(message.data()), message.size());
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256_final(&st, mac);
  return std::string(reinterpret_cast<const char*>(mac), sizeof mac);
}

std::string uri_encode(const std::string& text, bool keep_slash) {
  static const char* digits = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(digits[c >> 4]);
      out.push_back(digits[c & 15]);
    }
  }
  return out;
}

std::string canonical_query(std::vector<std::pair<std::string, std::string>> query) {
  for (auto& [k, v] : query) {
    k = uri_encode(k, false);
    v = uri_encode(v, false);
  }
  std::sort(query.begin(), query.end());
  std::string out;
  for (const auto& [k, v] : query) out += (out.empty() ? "" : "&") + k + "=" + v;
  return out;
}

sigv4_result sign_v4(const signed_request_input& request, const s3_credentials& credentials,
                     const std::string& region, const std::string& service, const std::string& amz_date) {
  if (amz_date.size() != 16 || amz_date[8] != 'T' || amz_date.back() != 'Z')
    throw std::invalid_argument("sign_v4: amz_date must be YYYYMMDDTHHMMSSZ, got '" + amz_date + "'");
  if (sodium_init() < 0) throw std::runtime_error("sign_v4: libsodium failed to initialise");
  sigv4_result out;
  std::string headers, signed_headers;
  for (const auto& [name, value] : request.headers) {  // std::map: sorted by lower-case name
    headers += name + ":" + trim(value) + "\n";
    signed_headers += (signed_headers.empty() ? "" : ";") + name;
  }
  out.canonical_request = request.method + "\n" + uri_encode(request.path, true) + "\n" +
                          canonical_query(request.query) + "\n" + headers + "\n" + signed_headers + "\n" +
                          request.payload_sha256;
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = date + "/" + region + "/" + service + "/aws4_request";
  out.string_to_sign = "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + sha256_hex(out.canonical_request);
  std::string key = hmac_sha256("AWS4" + credentials.secret_access_key, date);
  key = hmac_sha256(key, region);
  key = hmac_sha256(key, service);
  key = hmac_sha256(key, "aws4_request");
  const std::string mac = hmac_sha256(key, out.string_to_sign);
  out.signature = to_hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
  out.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                      ", SignedHeaders=" + signed_headers + ", Signature=" + out.signature;
  return out;
}

}  // namespace cohort::core::storage

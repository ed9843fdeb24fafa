// AWS Signature Version 4 for S3 requests: the canonical request, the string to sign and the
// Authorization header, with HMAC-SHA256 and SHA-256 from libsodium. Pure functions of their
// arguments (the caller supplies the time), so they are checked against AWS's published examples.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace cohort::core::storage {

struct s3_credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" unless temporary credentials (sent as x-amz-security-token)
};

// What is signed of one request. `path` and the query are raw (unencoded); the signer encodes
// them the way S3 does (RFC 3986 unreserved characters kept, '/' kept in the path only).
struct signed_request_input {
  std::string method;                                       // GET, PUT, POST, HEAD, DELETE
  std::string path;                                         // "/bucket/key" or "/key"
  std::vector<std::pair<std::string, std::string>> query;   // any order
  std::map<std::string, std::string> headers;               // lower-case names; host included
  std::string payload_sha256;                               // hex, or "UNSIGNED-PAYLOAD"
};

struct sigv4_result {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // hex
  std::string authorization;  // the Authorization header's value
};

// `amz_date` is the request time as "YYYYMMDDTHHMMSSZ" (the x-amz-date header, which the caller
// puts in `headers` too); `service` is "s3" for S3.
sigv4_result sign_v4(const signed_request_input& request, const s3_credentials& credentials,
                     const std::string& region, const std::string& service, const std::string& amz_date);

std::string sha256_hex(const void* data, std::size_t size);
inline std::string sha256_hex(const std::string& bytes) { return sha256_hex(bytes.data(), bytes.size()); }
std::string hmac_sha256(const std::string& key, const std::string& message);  // raw 32 bytes
// RFC 3986 percent-encoding as SigV4 wants it; `keep_slash` for paths.
std::string uri_encode(const std::string& text, bool keep_slash);
// The encoded query string in canonical order ("a=1&b=2"), as signed and as sent.
std::string canonical_query(std::vector<std::pair<std::string, std::string>> query);

}  // namespace cohort::core::storage

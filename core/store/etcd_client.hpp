// A client of etcd's v3 JSON gateway (POST /v3/kv/range, /v3/kv/txn, /v3/lease/grant, ...) over
// HTTP, for the etcd store. Keys and values travel base64-encoded, as the gateway wants; int64s
// come back as JSON strings. Fails over to the next endpoint on a connection error (a member
// that does not take a connection within 1 s, or whose host does not acknowledge a request's
// bytes within 1 s: it is cut off or down) or an etcd server that cannot serve now (5xx: no
// leader, leader changed), trying the list in rounds until `call_timeout` has passed. Not
// thread-safe: one owner.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cohort::core::store {

struct etcd_endpoint {
  std::string host;
  int port = 2379;
};

// A parsed "etcd://[USER@]HOST:PORT[,HOST:PORT...][/prefix]", or "etcds://..." for etcd's client
// port over TLS. The prefix (default "/cohort") has no trailing slash; every key of the store lies
// under "<prefix>/". With USER the client logs in to an etcd cluster that has authentication
// enabled, with the password in the environment variable COHORT_ETCD_PASSWORD (never in the
// location, which shows in process listings and logs). Over TLS the server's certificate is
// checked against the CA file in COHORT_ETCD_CA (else the system's CAs), and COHORT_ETCD_CERT +
// COHORT_ETCD_KEY name a client certificate for etcd's --client-cert-auth.
struct etcd_location {
  std::vector<etcd_endpoint> endpoints;
  std::string prefix = "/cohort";
  std::string user;  // "" when etcd's authentication is off
  bool tls = false;  // etcds://
  std::string text;  // as given, for messages
};

// The environment variables of the etcd client's secrets and TLS files.
inline constexpr const char* etcd_password_variable = "COHORT_ETCD_PASSWORD";
inline constexpr const char* etcd_ca_variable = "COHORT_ETCD_CA";
inline constexpr const char* etcd_cert_variable = "COHORT_ETCD_CERT";
inline constexpr const char* etcd_key_variable = "COHORT_ETCD_KEY";

// Throws store_error invalid naming what is wrong (no endpoint, a bad port, an empty host).
etcd_location parse_etcd_location(const std::string& location);

std::string base64_encode(const std::string& bytes);
// Throws store_error corrupt on text that is not base64.
std::string base64_decode(const std::string& text);

class etcd_client {
 public:
  explicit etcd_client(etcd_location location,
                       std::chrono::milliseconds call_timeout = std::chrono::seconds(5));
  ~etcd_client();
  etcd_client(const etcd_client&) = delete;
  etcd_client& operator=(const etcd_client&) = delete;

  // POSTs `body` to `path` ("/v3/kv/range") and returns the JSON answer. Throws store_error io
  // when no endpoint answered within the call timeout (naming each endpoint's last error), and
  // store_error invalid when etcd refused the request itself (4xx, with etcd's message). With a
  // user, the first call logs in (/v3/auth/authenticate) and every call carries the token; a
  // token etcd no longer knows (it expired) is replaced by logging in again, once per call.
  // Throws store_error invalid when the password is missing or etcd refuses the login.
  nlohmann::json call(const std::string& path, const nlohmann::json& body);

  // Opens a watch (/v3/watch with `create_request`) on the endpoint that answered last, on a
  // connection of its own, and blocks until it reports an event (true) or `timeout` passed or
  // the watch failed (false).
  bool watch(const nlohmann::json& create_request, std::chrono::milliseconds timeout);

  const etcd_location& location() const { return location_; }

 private:
  struct connection;
  // POSTs once round the endpoints (with the token when there is one).
  nlohmann::json post(const std::string& path, const nlohmann::json& body);
  void log_in();
  etcd_location location_;
  std::string token_;  // etcd's auth token; "" before the login or without a user
  std::chrono::milliseconds call_timeout_;
  std::vector<std::unique_ptr<connection>> connections_;
  std::size_t current_ = 0;  // the endpoint that answered last
};

// An int64 field of a gateway answer (a string, a number, or absent: 0).
std::int64_t etcd_int(const nlohmann::json& object, const char* field);

}  // namespace cohort::core::store

// etcd's v3 JSON gateway over HTTP (see etcd_client.hpp).
#include "core/store/etcd_client.hpp"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>

#include <thread>

#include "core/store/store_error.hpp"

namespace cohort::core::store {

namespace {

const char* const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

[[noreturn]] void bad_location(const std::string& location, const std::string& why) {
  throw store_error(store_error_kind::invalid, location,
                    "store location '" + location + "': " + why +
                        " (expected etcd://HOST:PORT[,HOST:PORT...][/prefix])");
}

}  // namespace

etcd_location parse_etcd_location(const std::string& location) {
  etcd_location out;
  out.tls = location.rfind("etcds://", 0) == 0;
  const std::string scheme = out.tls ? "etcds://" : "etcd://";
  if (location.rfind(scheme, 0) != 0) bad_location(location, "does not start with etcd:// or etcds:// (TLS)");
  out.text = location;
  auto rest = location.substr(scheme.size());
  const auto at = rest.find('@');
  if (at != std::string::npos && at < rest.find('/')) {
    out.user = rest.substr(0, at);
    if (out.user.empty()) bad_location(location, "the user before '@' is empty");
    if (out.user.find(':') != std::string::npos)
      bad_location(location, std::string("a password does not go in the location; set ") +
                                 etcd_password_variable + " for user '" + out.user.substr(0, out.user.find(':')) + "'");
    rest = rest.substr(at + 1);
  }
  auto slash = rest.find('/');
  if (slash != std::string::npos) {
    auto prefix = rest.substr(slash);
    while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
    if (prefix == "/") bad_location(location, "the prefix after the endpoints is empty");
    out.prefix = prefix;
    rest = rest.substr(0, slash);
  }
  std::size_t start = 0;
  while (start <= rest.size()) {
    auto comma = rest.find(',', start);
    auto item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) bad_location(location, "an endpoint is empty");
    etcd_endpoint e;
    auto colon = item.rfind(':');
    e.host = colon == std::string::npos ? item : item.substr(0, colon);
    if (e.host.empty()) bad_location(location, "endpoint '" + item + "' has no host");
    if (colon != std::string::npos) {
      auto port = item.substr(colon + 1);
      if (port.empty() || port.size() > 5 ||
          port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
          std::stoi(port) > 65535)
        bad_location(location, "endpoint '" + item + "' has port '" + port +
                                   "'; a port is a number from 1 to 65535");
      e.port = std::stoi(port);
    }
    out.endpoints.push_back(e);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.endpoints.empty()) bad_location(location, "no endpoint");
  return out;
}

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    std::uint32_t n = (std::uint8_t(bytes[i]) << 16) | (std::uint8_t(bytes[i + 1]) << 8) |
                      std::uint8_t(bytes[i + 2]);
    out += alphabet[n >> 18];
    out += alphabet[(n >> 12) & 63];
    out += alphabet[(n >> 6) & 63];
    out += alphabet[n & 63];
  }
  if (i < bytes.size()) {
    std::uint32_t n = std::uint8_t(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= std::uint8_t(bytes[i + 1]) << 8;
    out += alphabet[n >> 18];
    out += alphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(const std::string& text) {
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const char* p = std::strchr(alphabet, c);
    if (c == '\0' || p == nullptr)
      throw store_error(store_error_kind::corrupt, "",
                        "etcd answered with a key or value that is not base64");
    acc = (acc << 6) | std::uint32_t(p - alphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xFF);
    }
  }
  return out;
}

std::int64_t etcd_int(const nlohmann::json& object, const char* field) {
  if (!object.is_object()) return 0;
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (const std::exception&) {
    }
  }
  throw store_error(store_error_kind::corrupt, "",
                    std::string("etcd answered with field '") + field + "' = " + it->dump() +
                        ", not an integer");
}

namespace {

struct http_answer {
  int status = 0;     // 0: no answer (error says why)
  std::string body;
  std::string error;
};

// One POST. The gateway sends its error answers chunked with a gRPC trailer, which this
// cpp-httplib cannot parse: it reports a read error after the status line, headers and body have
// arrived. The body is taken as it streams in, so such an answer still counts as answered.
http_answer send_post(httplib::Client& client, const std::string& path, const std::string& token,
                      const std::string& body) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  if (!token.empty()) req.set_header("Authorization", token);
  http_answer out;
  req.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    out.body.append(data, length);
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool ok = client.send(req, res, error);
  const bool answered = ok || (res.status >= 400 && !out.body.empty());
  if (answered) out.status = res.status;
  else out.error = httplib::to_string(error);
  return out;
}

}  // namespace

namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// A client of one endpoint: plain HTTP, or over etcds:// TLS with the server checked against
// COHORT_ETCD_CA (else the system's CAs) and the client certificate of COHORT_ETCD_CERT/KEY.
std::unique_ptr<httplib::Client> make_http_client(const etcd_location& where, const etcd_endpoint& e) {
  const std::string base = std::string(where.tls ? "https://" : "http://") + e.host + ":" + std::to_string(e.port);
  if (!where.tls) return std::make_unique<httplib::Client>(base);
  const auto cert = env_or_empty(etcd_cert_variable), key = env_or_empty(etcd_key_variable);
  if (cert.empty() != key.empty())
    throw store_error(store_error_kind::invalid, where.text,
                      std::string("a client certificate needs both ") + etcd_cert_variable + " and " + etcd_key_variable);
  for (const auto& file : {env_or_empty(etcd_ca_variable), cert, key})
    if (!file.empty() && !std::filesystem::exists(file))
      throw store_error(store_error_kind::invalid, where.text, "TLS file '" + file + "' does not exist");
  auto client = cert.empty() ? std::make_unique<httplib::Client>(base)
                             : std::make_unique<httplib::Client>(base, cert, key);
  const auto ca = env_or_empty(etcd_ca_variable);
  if (!ca.empty()) client->set_ca_cert_path(ca.c_str());
  client->enable_server_certificate_verification(true);
  return client;
}

// A member whose host is cut off or gone never acknowledges the bytes of a request sent on a kept
// connection, and the read timeout (5 s, for a member that is slow to answer) would pass before
// the call moved on to the next endpoint: longer than a head's leader lease (3 s in the partition
// tests), which then ran out while other members could have renewed it. A kernel that has not
// had the request's bytes acknowledged within this time closes the connection, and the call
// moves on; a member that is slow to answer, but up, acknowledges at once and keeps the full read
// timeout.
constexpr unsigned unacknowledged_limit_ms = 1000;

void give_up_unacknowledged(socket_t sock) {
  const unsigned ms = unacknowledged_limit_ms;
  // Best effort: without it (a kernel before 2.6.37) a cut member costs the read timeout.
  (void)::setsockopt(sock, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

}  // namespace

struct etcd_client::connection {
  etcd_endpoint endpoint;
  std::unique_ptr<httplib::Client> owned;
  httplib::Client& client;
  connection(const etcd_location& where, const etcd_endpoint& e)
      : endpoint(e), owned(make_http_client(where, e)), client(*owned) {
    client.set_keep_alive(true);
    client.set_tcp_nodelay(true);  // else Nagle and delayed ACKs add 40 ms to every request
    client.set_socket_options(give_up_unacknowledged);
    client.set_connection_timeout(1, 0);
    client.set_read_timeout(5, 0);
    client.set_write_timeout(5, 0);
  }
  std::string name() const { return endpoint.host + ":" + std::to_string(endpoint.port); }
};

etcd_client::etcd_client(etcd_location location, std::chrono::milliseconds call_timeout)
    : location_(std::move(location)), call_timeout_(call_timeout) {
  for (const auto& e : location_.endpoints) connections_.push_back(std::make_unique<connection>(location_, e));
}

etcd_client::~etcd_client() = default;

void etcd_client::log_in() {
  const char* password = std::getenv(etcd_password_variable);
  if (password == nullptr)
    throw store_error(store_error_kind::invalid, location_.text,
                      "etcd user '" + location_.user + "' needs its password in " + etcd_password_variable);
  token_.clear();
  nlohmann::json answer;
  try {
    answer = post("/v3/auth/authenticate", {{"name", location_.user}, {"password", password}});
  } catch (const store_error& e) {
    if (e.kind() != store_error_kind::invalid) throw;
    throw store_error(store_error_kind::invalid, location_.text,
                      "etcd refused the login of user '" + location_.user + "' (the password in " +
                          etcd_password_variable + "): " + e.what());
  }
  if (!answer.contains("token") || !answer["token"].is_string() || answer["token"].get<std::string>().empty())
    throw store_error(store_error_kind::invalid, location_.text,
                      "etcd gave user '" + location_.user + "' no token: is authentication enabled on it?");
  token_ = answer["token"].get<std::string>();
}

nlohmann::json etcd_client::call(const std::string& path, const nlohmann::json& body) {
  if (location_.user.empty()) return post(path, body);
  if (token_.empty()) log_in();
  try {
    return post(path, body);
  } catch (const store_error& e) {
    // etcd forgets a simple token after --auth-token-ttl (5 min) without use: log in again.
    const std::string what = e.what();
    if (e.kind() != store_error_kind::invalid || what.find("invalid auth token") == std::string::npos) throw;
  }
  log_in();
  return post(path, body);
}

nlohmann::json etcd_client::post(const std::string& path, const nlohmann::json& body) {
  const auto deadline = std::chrono::steady_clock::now() + call_timeout_;
  const auto text = body.dump();
  std::vector<std::string> last_error(connections_.size());
  for (int round = 0;; ++round) {
    for (std::size_t k = 0; k < connections_.size(); ++k) {
      auto index = (current_ + k) % connections_.size();
      auto& c = *connections_[index];
      const auto res = send_post(c.client, path, token_, text);
      if (res.status == 0) {
        last_error[index] = res.error;
        continue;
      }
      if (res.status >= 500) {
        last_error[index] = "HTTP " + std::to_string(res.status) + ": " + res.body;
        continue;
      }
      auto answer = nlohmann::json::parse(res.body, nullptr, false);
      if (res.status != 200) {
        std::string message = res.body;
        if (!answer.is_discarded() && answer.contains("message") && answer["message"].is_string())
          message = answer["message"].get<std::string>();
        throw store_error(store_error_kind::invalid, location_.text,
                          "etcd at " + c.name() + " refused " + path + " (HTTP " +
                              std::to_string(res.status) + "): " + message);
      }
      if (answer.is_discarded() || !answer.is_object())
        throw store_error(store_error_kind::corrupt, location_.text,
                          "etcd at " + c.name() + " answered " + path + " with no JSON object");
      if (answer.contains("error")) {
        // A streaming endpoint (lease keep-alive) reports failures inside a 200 answer.
        last_error[index] = answer["error"].dump();
        continue;
      }
      current_ = index;
      return answer;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    // Every endpoint failed this round (an election in progress, members restarting): back off
    // a little before the next round rather than spinning.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50 * (round + 1), 500)));
  }
  std::string why;
  for (std::size_t i = 0; i < connections_.size(); ++i)
    why += (i ? "; " : "") + connections_[i]->name() + ": " + last_error[i];
  throw store_error(store_error_kind::io, location_.text,
                    "no etcd endpoint of " + location_.text + " served " + path + " within " +
                        std::to_string(call_timeout_.count()) + " ms (" + why + ")");
}

bool etcd_client::watch(const nlohmann::json& create_request, std::chrono::milliseconds timeout) {
  auto owned = make_http_client(location_, location_.endpoints[current_]);
  httplib::Client& client = *owned;
  client.set_tcp_nodelay(true);
  client.set_socket_options(give_up_unacknowledged);
  client.set_connection_timeout(1, 0);
  const auto ms = std::max<long long>(1, timeout.count());
  client.set_read_timeout(ms / 1000, (ms % 1000) * 1000);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  req.body = nlohmann::json{{"create_request", create_request}}.dump();
  req.set_header("Content-Type", "application/json");
  if (!token_.empty()) req.set_header("Authorization", token_);
  bool changed = false;
  std::string buffer;
  // The gateway streams one JSON object per line: first "created", then batches of "events".
  req.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    buffer.append(data, length);
    for (auto nl = buffer.find('\n'); nl != std::string::npos; nl = buffer.find('\n')) {
      auto line = nlohmann::json::parse(buffer.substr(0, nl), nullptr, false);
      buffer.erase(0, nl + 1);
      if (line.is_discarded()) continue;
      auto result = line.value("result", nlohmann::json::object());
      if (line.contains("error") || result.value("canceled", false)) return false;
      if (result.contains("events")) {
        changed = true;
        return false;  // ends the request
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  client.send(req, res, error);
  return changed;
}

}  // namespace cohort::core::store

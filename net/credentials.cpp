// The cluster's credentials file and the head's key store (see credentials.hpp).
#include "net/credentials.hpp"

#include <sodium.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "net/net_error.hpp"

namespace cohort::net {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* credentials_format = "cohort-credentials/1";
constexpr const char* server_key_format = "cohort-server-key/1";

std::string sys_error(const std::string& what, const fs::path& file) {
  return what + " " + file.string() + ": " + std::strerror(errno);
}

json read_json(const fs::path& file, const char* role) {
  std::error_code ec;
  if (!fs::exists(file, ec))
    throw credentials_error(std::string{role} + " " + file.string() + " does not exist");
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw credentials_error(sys_error(std::string{"cannot read "} + role, file));
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw credentials_error(std::string{role} + " " + file.string() + " is not valid JSON: "
                            + e.what());
  }
}

std::string string_field(const json& j, const fs::path& file, const char* field, bool required) {
  if (!j.is_object())
    throw credentials_error(file.string() + ": expected a JSON object");
  auto it = j.find(field);
  if (it == j.end()) {
    if (required)
      throw credentials_error(file.string() + ": missing field '" + field + "'");
    return {};
  }
  if (!it->is_string())
    throw credentials_error(file.string() + ": field '" + field + "' must be a string");
  return it->get<std::string>();
}

void check_format(const json& j, const fs::path& file, const char* expected) {
  auto format = string_field(j, file, "format", true);
  if (format != expected)
    throw credentials_error(file.string() + ": field 'format' is '" + format + "', expected '"
                            + expected + "'");
}

std::string temp_name(const fs::path& file) {
  std::random_device rd;
  return file.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
}

// Writes text to a new 0600 temp file next to `file` and returns its path.
fs::path write_private_temp(const fs::path& file, const std::string& text) {
  fs::path tmp = temp_name(file);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw credentials_error(sys_error("cannot create", tmp));
  bool ok = ::fchmod(fd, 0600) == 0;
  std::size_t done = 0;
  while (ok && done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    ok = n > 0;
    if (ok)
      done += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  int saved = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    errno = saved;
    throw credentials_error(sys_error("cannot write", tmp));
  }
  return tmp;
}

// Creates `file` with `text` unless it already exists; true when this call created it.
bool create_exclusive(const fs::path& file, const std::string& text) {
  fs::path tmp = write_private_temp(file, text);
  int rc = ::link(tmp.c_str(), file.c_str());
  int saved = errno;
  ::unlink(tmp.c_str());
  if (rc == 0)
    return true;
  if (saved == EEXIST)
    return false;
  errno = saved;
  throw credentials_error(sys_error("cannot create", file));
}

json credentials_json(const cluster_credentials& c) {
  json j = {{"format", credentials_format},
            {"server_public_key", c.server_public_key},
            {"client_public_key", c.client.public_key},
            {"client_secret_key", c.client.secret_key}};
  if (!c.server_address.empty())
    j["server_address"] = c.server_address;
  return j;
}

curve_keypair load_server_keys(const fs::path& file) {
  json j = read_json(file, "server key file");
  check_format(j, file, server_key_format);
  curve_keypair keys{string_field(j, file, "public_key", true),
                     string_field(j, file, "secret_key", true)};
  check_keypair(keys, file.string());
  return keys;
}

} // namespace

cluster_credentials load_credentials(const fs::path& file) {
  json j = read_json(file, "credentials file");
  check_format(j, file, credentials_format);
  cluster_credentials c;
  c.server_public_key = string_field(j, file, "server_public_key", true);
  c.client.public_key = string_field(j, file, "client_public_key", true);
  c.client.secret_key = string_field(j, file, "client_secret_key", true);
  c.server_address = string_field(j, file, "server_address", false);
  decode_z85_key(c.server_public_key, file.string() + ": field 'server_public_key'");
  check_keypair(c.client, file.string() + ": client keys");
  return c;
}

cluster_credentials load_credentials_from(const std::string& flag) {
  if (!flag.empty())
    return load_credentials(flag);
  const char* env = std::getenv("COHORT_CREDENTIALS");
  if (env != nullptr && *env != '\0')
    return load_credentials(env);
  throw credentials_error("no credentials: pass --credentials FILE or set COHORT_CREDENTIALS to "
                          "the file cluster-head wrote to <store>/cluster/credentials.json");
}

void save_credentials(const fs::path& file, const cluster_credentials& creds) {
  fs::path tmp = write_private_temp(file, credentials_json(creds).dump(2) + "\n");
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    throw credentials_error(sys_error("cannot write", file));
  }
}

fs::path credentials_file_in(const fs::path& store_dir) {
  return store_dir / "cluster" / "credentials.json";
}

cluster_secrets ensure_cluster_credentials(const fs::path& store_dir) {
  const fs::path dir = store_dir / "cluster";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec) fs::permissions(dir, fs::perms::owner_all, ec);  // the keys' directory: owner only
  if (ec)
    throw credentials_error("cannot create " + dir.string() + " (mode 0700): " + ec.message());
  const fs::path key_file = dir / "server_key.json";
  cluster_secrets s;
  s.credentials_file = dir / "credentials.json";

  if (!fs::exists(key_file) && fs::exists(s.credentials_file))
    throw credentials_error(s.credentials_file.string() + " exists but " + key_file.string()
                            + " is missing; restore it from a backup, or delete both files to "
                              "create new keys (every node and client then needs the new "
                              "credentials file)");
  curve_keypair server = generate_curve_keypair();
  json key_json = {{"format", server_key_format},
                   {"public_key", server.public_key},
                   {"secret_key", server.secret_key}};
  s.created = create_exclusive(key_file, key_json.dump(2) + "\n");
  s.server = load_server_keys(key_file);

  cluster_credentials fresh{s.server.public_key, generate_curve_keypair(), {}};
  bool created_creds = create_exclusive(s.credentials_file, credentials_json(fresh).dump(2) + "\n");
  s.created = s.created || created_creds;
  s.credentials = load_credentials(s.credentials_file);
  if (s.credentials.server_public_key != s.server.public_key)
    throw credentials_error(s.credentials_file.string() + ": server_public_key does not match "
                            + key_file.string() + "; the two files come from different "
                              "clusters");
  return s;
}

std::string metrics_token(const cluster_credentials& creds) {
  static constexpr char context[] = "cohort metrics token v1";
  unsigned char hash[32];
  const auto& secret = creds.client.secret_key;
  crypto_generichash(hash, sizeof hash, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(),
                     reinterpret_cast<const unsigned char*>(context), sizeof context - 1);
  char hex[2 * sizeof hash + 1];
  return sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
}

} // namespace cohort::net

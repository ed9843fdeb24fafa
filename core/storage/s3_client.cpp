// The S3 client: URL and environment parsing, signed HTTP requests with retries, S3's XML answers.
#include "core/storage/s3_client.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace cohort::core::storage {
namespace {

constexpr std::uint64_t min_part_size = 5ull << 20;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The text of the first <tag>...</tag> at or after `from` (XML entities decoded); advances `from`
// past it. nullopt when absent.
std::optional<std::string> xml_tag(const std::string& xml, const std::string& tag, std::size_t& from) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const auto b = xml.find(open, from);
  if (b == std::string::npos) return std::nullopt;
  const auto e = xml.find(close, b + open.size());
  if (e == std::string::npos) return std::nullopt;
  from = e + close.size();
  const std::string raw = xml.substr(b + open.size(), e - b - open.size());
  std::string out;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '&') {
      out.push_back(raw[i]);
      continue;
    }
    static const std::pair<const char*, char> entities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    bool done = false;
    for (const auto& [name, c] : entities) {
      if (raw.compare(i, std::strlen(name), name) == 0) {
        out.push_back(c);
        i += std::strlen(name) - 1;
        done = true;
        break;
      }
    }
    if (!done) out.push_back('&');
  }
  return out;
}
std::optional<std::string> xml_tag(const std::string& xml, const std::string& tag) {
  std::size_t from = 0;
  return xml_tag(xml, tag, from);
}

std::string amz_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[20];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// [profile] sections of an AWS shared credentials file: name -> key -> value.
std::map<std::string, std::map<std::string, std::string>> read_ini(const std::string& path) {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::ifstream in(path);
  std::string line, section;
  auto trim = [](std::string s) {
    const auto b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return std::string();
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[section][trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

}  // namespace

s3_config s3_config_from_environment(const std::string& endpoint) {
  s3_config c;
  c.endpoint = endpoint;
  if (c.endpoint.empty()) c.endpoint = env("AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = env("AWS_ENDPOINT_URL");
  c.region = env("AWS_REGION");
  if (c.region.empty()) c.region = env("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = "us-east-1";
  c.credentials.access_key_id = env("AWS_ACCESS_KEY_ID");
  c.credentials.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
  c.credentials.session_token = env("AWS_SESSION_TOKEN");
  if (!c.credentials.access_key_id.empty() || !c.credentials.secret_access_key.empty()) {
    if (c.credentials.access_key_id.empty() || c.credentials.secret_access_key.empty())
      throw std::invalid_argument("S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together");
    return c;
  }
  std::string file = env("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) {
    const std::string home = env("HOME");
    if (home.empty())
      throw std::invalid_argument("S3 credentials: AWS_ACCESS_KEY_ID is not set and HOME is unset (no ~/.aws/credentials)");
    file = home + "/.aws/credentials";
  }
  std::string profile = env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  if (!std::ifstream(file))
    throw std::invalid_argument("S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or write profile [" +
                                profile + "] to " + file + " (not found)");
  const auto ini = read_ini(file);
  const auto it = ini.find(profile);
  if (it == ini.end()) throw std::invalid_argument("S3 credentials: " + file + " has no profile [" + profile + "] (AWS_PROFILE)");
  auto value = [&](const char* k) {
    const auto v = it->second.find(k);
    return v == it->second.end() ? std::string() : v->second;
  };
  c.credentials.access_key_id = value("aws_access_key_id");
  c.credentials.secret_access_key = value("aws_secret_access_key");
  c.credentials.session_token = value("aws_session_token");
  if (c.credentials.access_key_id.empty() || c.credentials.secret_access_key.empty())
    throw std::invalid_argument("S3 credentials: profile [" + profile + "] of " + file +
                                " needs aws_access_key_id and aws_secret_access_key");
  return c;
}

struct s3_client::answer {
  int status = 0;
  std::string body;
  httplib::Headers headers;
};

s3_client::s3_client(s3_config config) : config_(std::move(config)) {
  if (config_.max_attempts < 1) throw std::invalid_argument("s3_client: max_attempts must be at least 1");
  if (config_.endpoint.empty()) {
    path_style_ = false;
    host_ = "s3." + config_.region + ".amazonaws.com";
    return;
  }
  const std::string& e = config_.endpoint;
  std::string rest;
  if (e.rfind("http://", 0) == 0) {
    tls_ = false;
    port_ = 80;
    rest = e.substr(7);
  } else if (e.rfind("https://", 0) == 0) {
    rest = e.substr(8);
  } else {
    throw std::invalid_argument("S3 endpoint \"" + e + "\" must start with http:// or https://");
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.empty() || rest.find('/') != std::string::npos)
    throw std::invalid_argument("S3 endpoint \"" + e + "\" must be http(s)://HOST[:PORT] with no path");
  host_ = rest;
  const auto colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']') == std::string::npos) {
    try {
      port_ = std::stoi(rest.substr(colon + 1));
    } catch (const std::exception&) {
      throw std::invalid_argument("S3 endpoint \"" + e + "\" has a bad port");
    }
    if (port_ <= 0 || port_ > 65535) throw std::invalid_argument("S3 endpoint \"" + e + "\" has a bad port");
  }
}

s3_client::answer s3_client::send(const std::string& method, const std::string& bucket,
                                  const std::string& key,
                                  std::vector<std::pair<std::string, std::string>> query,
                                  const std::string& body,
                                  const std::vector<std::pair<std::string, std::string>>& extra_headers,
                                  const std::string& sink_path,
                                  const std::function<void(std::uint64_t)>& sink_bytes) const {
  const std::string host = path_style_ ? host_ : bucket + "." + host_;
  const std::string path = path_style_ ? "/" + bucket + (key.empty() ? "" : "/" + key) : "/" + key;
  const std::string where = method + " s3://" + bucket + (key.empty() ? "" : "/" + key);
  const std::string scheme_host = (tls_ ? "https://" : "http://") + host;
  const std::string payload_hash = sha256_hex(body);
  const std::string target = uri_encode(path, true) + (query.empty() ? "" : "?" + canonical_query(query));
  std::string last_error;
  for (int attempt = 0; attempt < config_.max_attempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(config_.retry_base_delay * (1 << (attempt - 1)));
    signed_request_input in;
    in.method = method;
    in.path = path;
    in.query = query;
    in.payload_sha256 = payload_hash;
    const std::string date = amz_now();
    in.headers["host"] = host;
    in.headers["x-amz-date"] = date;
    in.headers["x-amz-content-sha256"] = payload_hash;
    if (!config_.credentials.session_token.empty())
      in.headers["x-amz-security-token"] = config_.credentials.session_token;
    for (const auto& [k, v] : extra_headers) in.headers[k] = v;
    const auto sig = sign_v4(in, config_.credentials, config_.region, "s3", date);

    httplib::Client client(scheme_host);
    client.set_url_encode(false);
    client.set_connection_timeout(config_.timeout);
    client.set_read_timeout(config_.timeout);
    client.set_write_timeout(config_.timeout);
    httplib::Request req;
    req.method = method;
    req.path = target;
    for (const auto& [k, v] : in.headers) req.headers.emplace(k == "host" ? "Host" : k, v);
    req.headers.emplace("Authorization", sig.authorization);
    if (method == "PUT" || method == "POST") {
      req.body = body;
      req.headers.emplace("Content-Type", "application/octet-stream");
    }
    answer out;
    std::ofstream sink;
    bool sink_ok = true;
    if (!sink_path.empty()) {
      req.response_handler = [&](const httplib::Response& r) {
        out.status = r.status;
        if (r.status / 100 == 2) {
          sink.open(sink_path, std::ios::binary | std::ios::trunc);
          sink_ok = static_cast<bool>(sink);
        }
        return sink_ok;
      };
      req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
        if (out.status / 100 == 2) {
          sink.write(data, static_cast<std::streamsize>(n));
          sink_ok = static_cast<bool>(sink);
          if (sink_ok && sink_bytes) sink_bytes(n);
        } else {
          out.body.append(data, n);
        }
        return sink_ok;
      };
    }
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    const bool sent = client.send(req, res, error);
    if (!sink_ok) throw s3_error(where + ": cannot write " + sink_path, 0, "LocalWriteError");
    if (!sent) {
      last_error = httplib::to_string(error);
      continue;
    }
    if (sink_path.empty()) out.body = std::move(res.body);
    out.status = res.status;
    out.headers = res.headers;
    if (sink.is_open()) {
      sink.close();
      if (!sink) throw s3_error(where + ": cannot write " + sink_path, 0, "LocalWriteError");
    }
    // S3 may answer 200 to CompleteMultipartUpload and put an <Error> in the body.
    const bool error_body = out.status == 200 && method == "POST" && out.body.find("<Error>") != std::string::npos;
    if (out.status / 100 == 2 && !error_body) return out;
    const std::string code = xml_tag(out.body, "Code").value_or(out.status == 404 ? "NotFound" : "HTTP" + std::to_string(out.status));
    const std::string message = xml_tag(out.body, "Message").value_or("");
    last_error = std::to_string(out.status) + " " + code + (message.empty() ? "" : ": " + message);
    if (out.status / 100 == 5 || out.status == 429 || error_body) continue;
    throw s3_error(where + ": " + last_error, out.status, code);
  }
  throw s3_error(where + ": no success after " + std::to_string(config_.max_attempts) + " attempts at " +
                     scheme_host + "; last: " + last_error,
                 0, "Unavailable");
}

void s3_client::put_object(const std::string& bucket, const std::string& key, const std::string& bytes) const {
  send("PUT", bucket, key, {}, bytes, {});
}

std::string s3_client::get_object(const std::string& bucket, const std::string& key) const {
  return send("GET", bucket, key, {}, "", {}).body;
}

std::string s3_client::get_range(const std::string& bucket, const std::string& key, std::uint64_t first,
                                 std::uint64_t length, const std::string& etag) const {
  if (length == 0) return "";
  const std::string range = "bytes=" + std::to_string(first) + "-" + std::to_string(first + length - 1);
  const std::string where = "GET s3://" + bucket + "/" + key + " " + range;
  std::vector<std::pair<std::string, std::string>> headers{{"range", range}};
  if (!etag.empty()) headers.emplace_back("if-match", etag);
  auto a = send("GET", bucket, key, {}, "", headers);
  if (a.status != 206 && a.body.size() != length)
    throw s3_error(where + ": the server ignored the range", a.status, "RangeIgnored");
  if (!etag.empty()) {
    const auto answered = a.headers.find("ETag");
    if (answered != a.headers.end() && answered->second != etag)
      throw s3_error(where + ": the object changed: ETag " + answered->second + ", expected " + etag, 412,
                     "PreconditionFailed");
  }
  if (a.body.size() != length)
    throw s3_error(where + ": got " + std::to_string(a.body.size()) + " of the " + std::to_string(length) +
                       " bytes asked (the object ends inside the range)",
                   a.status, "ShortRange");
  return std::move(a.body);
}

void s3_client::get_to_file(const std::string& bucket, const std::string& key, const std::string& path,
                            const std::function<void(std::uint64_t)>& on_bytes) const {
  send("GET", bucket, key, {}, "", {}, path, on_bytes);
}

std::string s3_client::get_to_file_checked(const std::string& bucket, const std::string& key,
                                           const std::string& path,
                                           const std::function<std::string(const std::string&)>& accept) const {
  const std::string part = path + ".part-" + std::to_string(::getpid()) + "-" +
                           std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  std::error_code ec;
  try {
    get_to_file(bucket, key, part);
  } catch (const s3_error&) {
    std::filesystem::remove(part, ec);
    throw;
  }
  if (std::string why = accept(part); !why.empty()) {
    std::filesystem::remove(part, ec);
    return why;
  }
  std::filesystem::rename(part, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(part, ec);
    throw s3_error(path + ": cannot move the fetched copy of s3://" + bucket + "/" + key + " into place: " + why, 0,
                   "LocalWriteError");
  }
  return "";
}

std::optional<s3_object_info> s3_client::head_object(const std::string& bucket, const std::string& key) const {
  try {
    const auto a = send("HEAD", bucket, key, {}, "", {});
    s3_object_info info;
    info.key = key;
    const auto len = a.headers.find("Content-Length");
    if (len != a.headers.end()) info.size = std::stoull(len->second);
    const auto etag = a.headers.find("ETag");
    if (etag != a.headers.end()) info.etag = etag->second;
    return info;
  } catch (const s3_error& e) {
    if (e.not_found()) return std::nullopt;
    throw;
  }
}

std::vector<s3_object_info> s3_client::list_objects(const std::string& bucket, const std::string& prefix,
                                                    int page_size) const {
  std::vector<s3_object_info> out;
  std::string token;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> query{{"list-type", "2"}, {"prefix", prefix}};
    if (page_size > 0) query.emplace_back("max-keys", std::to_string(page_size));
    if (!token.empty()) query.emplace_back("continuation-token", token);
    const auto a = send("GET", bucket, "", query, "", {});
    std::size_t from = 0;
    while (auto contents = xml_tag(a.body, "Contents", from)) {
      s3_object_info info;
      info.key = xml_tag(*contents, "Key").value_or("");
      info.size = std::stoull(xml_tag(*contents, "Size").value_or("0"));
      info.etag = xml_tag(*contents, "ETag").value_or("");
      out.push_back(std::move(info));
    }
    if (xml_tag(a.body, "IsTruncated").value_or("false") != "true") break;
    token = xml_tag(a.body, "NextContinuationToken").value_or("");
    if (token.empty())
      throw s3_error("LIST s3://" + bucket + "/" + prefix + ": a truncated page without NextContinuationToken", a.status,
                     "BadListing");
  }
  return out;
}

void s3_client::delete_object(const std::string& bucket, const std::string& key) const {
  try {
    send("DELETE", bucket, key, {}, "", {});
  } catch (const s3_error& e) {
    if (!e.not_found() || e.code() == "NoSuchBucket") throw;
  }
}

std::string s3_client::create_multipart_upload(const std::string& bucket, const std::string& key) const {
  const auto a = send("POST", bucket, key, {{"uploads", ""}}, "", {});
  const auto id = xml_tag(a.body, "UploadId");
  if (!id || id->empty())
    throw s3_error("POST s3://" + bucket + "/" + key + "?uploads: the answer has no UploadId", a.status, "BadAnswer");
  return *id;
}

s3_part s3_client::upload_part(const std::string& bucket, const std::string& key, const std::string& upload_id,
                               int part_number, const std::string& bytes) const {
  if (part_number < 1 || part_number > 10000)
    throw std::invalid_argument("upload_part: part numbers are 1..10000, got " + std::to_string(part_number));
  const auto a = send("PUT", bucket, key, {{"partNumber", std::to_string(part_number)}, {"uploadId", upload_id}}, bytes, {});
  const auto etag = a.headers.find("ETag");
  if (etag == a.headers.end())
    throw s3_error("PUT s3://" + bucket + "/" + key + " part " + std::to_string(part_number) + ": no ETag in the answer",
                   a.status, "BadAnswer");
  return {part_number, etag->second};
}

void s3_client::complete_multipart_upload(const std::string& bucket, const std::string& key,
                                          const std::string& upload_id, const std::vector<s3_part>& parts) const {
  std::string xml = "<CompleteMultipartUpload>";
  for (const auto& p : parts) {
    std::string etag;
    for (char c : p.etag) etag += c == '"' ? std::string("&quot;") : std::string(1, c);
    xml += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>" + etag + "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  send("POST", bucket, key, {{"uploadId", upload_id}}, xml, {});
}

void s3_client::abort_multipart_upload(const std::string& bucket, const std::string& key,
                                       const std::string& upload_id) const {
  send("DELETE", bucket, key, {{"uploadId", upload_id}}, "", {});
}

std::uint64_t multipart_part_size(std::uint64_t size, std::uint64_t wanted) {
  const std::uint64_t needed = (size + max_upload_parts - 1) / max_upload_parts;
  if (needed <= wanted) return wanted;
  const std::uint64_t mib = 1ull << 20;
  return (needed + mib - 1) / mib * mib;
}

namespace {

// A file being read for an upload, one part at a time from any thread (pread).
class upload_source {
 public:
  upload_source(const std::string& path, std::string what) : what_(std::move(what)) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0) {
      if (fd_ >= 0) ::close(fd_);
      throw s3_error(what_ + ": cannot read " + path, 0, "LocalReadError");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
    path_ = path;
  }
  ~upload_source() { ::close(fd_); }
  upload_source(const upload_source&) = delete;
  upload_source& operator=(const upload_source&) = delete;

  std::uint64_t size() const { return size_; }
  std::string read(std::uint64_t offset, std::uint64_t n) const {
    std::string buf(n, '\0');
    for (std::uint64_t done = 0; done < n;) {
      const ssize_t k = ::pread(fd_, buf.data() + done, n - done, static_cast<off_t>(offset + done));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) throw s3_error(what_ + ": cannot read " + path_, 0, "LocalReadError");
      done += static_cast<std::uint64_t>(k);
    }
    return buf;
  }

 private:
  std::string what_;
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// A file being written by ranges from any thread (pwrite), created or truncated.
class download_target {
 public:
  download_target(const std::string& path, std::string what) : what_(std::move(what)), path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw s3_error(what_ + ": cannot write " + path + ": " + std::strerror(errno), 0, "LocalWriteError");
  }
  ~download_target() { ::close(fd_); }
  download_target(const download_target&) = delete;
  download_target& operator=(const download_target&) = delete;

  void write(std::uint64_t offset, const std::string& bytes) const {
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t k =
          ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0)
        throw s3_error(what_ + ": cannot write " + path_ + ": " + std::strerror(errno), 0, "LocalWriteError");
      done += static_cast<std::size_t>(k);
    }
  }

 private:
  std::string what_;
  std::string path_;
  int fd_ = -1;
};

// Runs work(i) for each part i of `count`, up to `streams` at once, each on a thread of its
// own; told(i) runs once parts 0..i are all done, for each i in order and one call at a time.
// The first error (of a work or a told) stops the taking of parts, no told runs after it, and it
// is rethrown once every thread has stopped.
class parallel_parts {
 public:
  parallel_parts(std::size_t count, std::function<void(std::size_t)> work,
                 std::function<void(std::size_t)> told)
      : work_(std::move(work)), told_fn_(std::move(told)), done_(count, false) {}

  void run(std::size_t streams) {
    std::vector<std::thread> threads;
    try {
      for (std::size_t t = 0; t < std::min(streams, done_.size()); ++t)
        threads.emplace_back([this] { take_parts(); });
    } catch (...) {  // no thread to be had: the ones started stop, and the transfer fails
      fail(std::current_exception());
    }
    for (auto& t : threads) t.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void take_parts() {
    for (;;) {
      std::size_t i = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (error_ || next_ == done_.size()) return;
        i = next_++;
      }
      try {
        work_(i);
        std::lock_guard<std::mutex> lock(mutex_);
        done_[i] = true;
        while (!error_ && told_ < done_.size() && done_[told_]) told_fn_(told_++);
      } catch (...) {
        fail(std::current_exception());
        return;
      }
    }
  }

  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::move(e);
  }

  const std::function<void(std::size_t)> work_;
  const std::function<void(std::size_t)> told_fn_;
  std::mutex mutex_;  // guards the members below
  std::vector<bool> done_;
  std::size_t next_ = 0;  // the next part to take
  std::size_t told_ = 0;  // parts told
  std::exception_ptr error_;
};

// Part i of `size` bytes cut in `part_size` pieces: its offset and length.
std::pair<std::uint64_t, std::uint64_t> part_of(std::size_t i, std::uint64_t size, std::uint64_t part_size) {
  const std::uint64_t offset = i * part_size;
  return {offset, std::min(part_size, size - offset)};
}

std::size_t parts_in(std::uint64_t size, std::uint64_t part_size) {
  return static_cast<std::size_t>((size + part_size - 1) / part_size);
}

}  // namespace

void s3_client::get_to_file_in_ranges(const std::string& bucket, const s3_object_info& object,
                                      const std::string& path,
                                      const std::function<void(std::uint64_t)>& on_bytes,
                                      std::uint64_t range_bytes) const {
  if (object.size <= range_bytes) return get_to_file(bucket, object.key, path, on_bytes);
  const download_target file(path, "GET s3://" + bucket + "/" + object.key);
  parallel_parts gets(
      parts_in(object.size, range_bytes),
      [&](std::size_t i) {
        const auto [offset, n] = part_of(i, object.size, range_bytes);
        file.write(offset, get_range(bucket, object.key, offset, n, object.etag));
      },
      [&](std::size_t i) {
        if (on_bytes) on_bytes(part_of(i, object.size, range_bytes).second);
      });
  gets.run(download_streams);
}

void s3_client::upload_file(const std::string& bucket, const std::string& key, const std::string& path,
                            std::uint64_t part_size,
                            const std::function<void(int, std::uint64_t)>& after_part) const {
  if (part_size < min_part_size)
    throw std::invalid_argument("upload_file: part_size must be at least 5 MiB (S3's minimum), got " +
                                std::to_string(part_size));
  const upload_source file(path, "PUT s3://" + bucket + "/" + key);
  const std::uint64_t size = file.size();
  part_size = multipart_part_size(size, part_size);
  if (size <= part_size) {
    put_object(bucket, key, file.read(0, size));
    if (after_part) after_part(1, size);
    return;
  }
  const std::string upload_id = create_multipart_upload(bucket, key);
  try {
    std::vector<s3_part> parts(parts_in(size, part_size));
    parallel_parts uploads(
        parts.size(),
        [&](std::size_t i) {
          const auto [offset, n] = part_of(i, size, part_size);
          parts[i] = upload_part(bucket, key, upload_id, static_cast<int>(i) + 1, file.read(offset, n));
        },
        [&](std::size_t i) {
          if (after_part) after_part(static_cast<int>(i) + 1, part_of(i, size, part_size).second);
        });
    uploads.run(upload_streams);
    complete_multipart_upload(bucket, key, upload_id, parts);
  } catch (...) {
    try {
      abort_multipart_upload(bucket, key, upload_id);
    } catch (const std::exception&) {
      // The parts stay invisible; a bucket lifecycle rule removes unfinished uploads.
    }
    throw;
  }
}

}  // namespace cohort::core::storage

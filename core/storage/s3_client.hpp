// A client of S3 and S3-compatible servers: PUT, GET (whole or a byte range, into memory or a
// file; a large object into a file in ranges, several at once), HEAD, LIST (v2, every page),
// DELETE, and multipart uploads (create, upload part, complete, abort; a file's parts several at
// once), signed with SigV4.
//
// Contract:
// - Threads: an s3_client is immutable once built; every call opens its own connection, so any
//   number of threads may call one client at once.
// - Retries: a request that gets no answer (connection refused or reset, timeout) or a 5xx / 429
//   answer is sent again, re-signed, up to s3_config::max_attempts times in all, waiting
//   retry_base_delay * 2^n between tries. 4xx answers are final. A retry after a lost answer is
//   safe: create_multipart_upload may leave an unused upload behind (no reader sees it), and
//   complete_multipart_upload may then answer NoSuchUpload for an object that is complete (its
//   caller fails and writes nothing that depends on it, so nothing is committed wrongly).
// - Atomicity (S3's): an object written by put_object or complete_multipart_upload appears
//   whole or not at all; uploaded parts are invisible until the upload is completed; nothing
//   spans two keys. Protocols built on top (the checkpoint commit) order their writes and write
//   their marker object last.
// - Errors: s3_error, whose message names the operation, bucket and key, the HTTP status and
//   S3's error code and message (e.g. "PUT s3://b/k: 403 SignatureDoesNotMatch: ...").
//
// Configuration (s3_config_from_environment): credentials from AWS_ACCESS_KEY_ID +
// AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), else the profile AWS_PROFILE (default "default")
// of the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials); region
// from AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1; endpoint from the caller, else
// AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS's (https://s3.REGION.amazonaws.com,
// virtual-hosted bucket names). A custom endpoint (an S3-compatible server) is addressed
// path-style: http(s)://HOST:PORT/BUCKET/KEY.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/s3_url.hpp"
#include "core/storage/sigv4.hpp"

namespace cohort::core::storage {

class s3_error : public std::runtime_error {
 public:
  s3_error(const std::string& message, int http_status, std::string code)
      : std::runtime_error(message), http_status_(http_status), code_(std::move(code)) {}
  int http_status() const noexcept { return http_status_; }  // 0: no answer
  const std::string& code() const noexcept { return code_; }  // S3's code: NoSuchKey, ...
  bool not_found() const noexcept { return http_status_ == 404; }

 private:
  int http_status_;
  std::string code_;
};

using config::is_s3_url;
using config::parse_s3_url;
using config::s3_url;

struct s3_config {
  std::string endpoint;  // "http(s)://HOST[:PORT]"; "" for AWS's endpoint of `region`
  std::string region = "us-east-1";
  s3_credentials credentials;
  int max_attempts = 4;
  std::chrono::milliseconds retry_base_delay{200};
  std::chrono::seconds timeout{60};  // connect, read and write, per request
};
// See the header comment. Throws std::invalid_argument naming the variable or file at fault
// (no credentials anywhere, a profile missing from the file, a malformed endpoint URL).
s3_config s3_config_from_environment(const std::string& endpoint = "");

struct s3_object_info {
  std::string key;
  std::uint64_t size = 0;
  std::string etag;
};

struct s3_part {
  int number = 0;    // 1..10000
  std::string etag;  // as the server answered it
};

// S3's limit on the parts of one multipart upload.
inline constexpr std::uint64_t max_upload_parts = 10000;
// The parts of one upload, or the ranges of one download, in flight at once (the AWS CLI's
// default is 10): one connection each.
inline constexpr std::size_t upload_streams = 8;
inline constexpr std::size_t download_streams = 8;
inline constexpr std::uint64_t download_range_bytes = 16ull << 20;

// The part size of a multipart upload of `size` bytes: `wanted`, or the smallest whole number of
// MiB that keeps the upload within max_upload_parts parts (8 MiB parts carry at most about 78 GiB:
// a 7B model's fp32 weights and Adam moments on one rank are that much).
std::uint64_t multipart_part_size(std::uint64_t size, std::uint64_t wanted);

class s3_client {
 public:
  explicit s3_client(s3_config config);  // throws std::invalid_argument for a bad endpoint
  const s3_config& config() const { return config_; }

  void put_object(const std::string& bucket, const std::string& key, const std::string& bytes) const;
  std::string get_object(const std::string& bucket, const std::string& key) const;
  // Bytes [first, first + length) of the object: exactly `length` of them, else s3_error
  // (ShortRange: the object ends inside the range). With `etag` (as a listing or HEAD gave it) the
  // request carries If-Match and an answer from another version of the object (a different ETag)
  // is refused: s3_error 412 PreconditionFailed, so ranges of one read never mix two uploads.
  std::string get_range(const std::string& bucket, const std::string& key, std::uint64_t first,
                        std::uint64_t length, const std::string& etag = "") const;
  // Streams the object into `path` (created or truncated; written again from the start on a retry).
  // `on_bytes(n)` (optional) runs after each n bytes reach the file, a retry's bytes counted again:
  // a transfer's progress, for a heartbeat.
  void get_to_file(const std::string& bucket, const std::string& key, const std::string& path,
                   const std::function<void(std::uint64_t)>& on_bytes = {}) const;
  // `object` (its key, size and ETag, as a listing gave them) into `path` (created or truncated):
  // an object larger than `range_bytes` in ranges of that size, download_streams of them at once,
  // each written at its offset and all of one version of the object (If-Match its ETag: one
  // uploaded since fails the download with 412 PreconditionFailed); a smaller one as get_to_file
  // does. `on_bytes(n)` (optional) runs as each range reaches the file, in order, one call at a
  // time. On an error no further range is asked for and the first error is thrown; the file is
  // left partial (the checkpoint download writes COMMITTED last for that).
  void get_to_file_in_ranges(const std::string& bucket, const s3_object_info& object, const std::string& path,
                             const std::function<void(std::uint64_t)>& on_bytes = {},
                             std::uint64_t range_bytes = download_range_bytes) const;
  // get_to_file into a file of this process's own (PATH.part-PID-THREAD), renamed onto `path` only
  // once `accept(part)` returns "": a reader of the old copy (another process sharing the
  // directory) keeps reading it intact. Returns "" when the copy is in place, else what `accept`
  // said (the part removed). Throws s3_error for the download, or (LocalWriteError) when the part
  // cannot be renamed; the part is removed then too.
  std::string get_to_file_checked(const std::string& bucket, const std::string& key, const std::string& path,
                                  const std::function<std::string(const std::string& part)>& accept) const;
  // nullopt when the object does not exist.
  std::optional<s3_object_info> head_object(const std::string& bucket, const std::string& key) const;
  // Every object whose key starts with `prefix`, in key order, following continuation tokens;
  // `page_size` 0 leaves the page size to the server (1000 on S3).
  std::vector<s3_object_info> list_objects(const std::string& bucket, const std::string& prefix,
                                           int page_size = 0) const;
  void delete_object(const std::string& bucket, const std::string& key) const;  // absent: no error

  std::string create_multipart_upload(const std::string& bucket, const std::string& key) const;  // upload id
  s3_part upload_part(const std::string& bucket, const std::string& key, const std::string& upload_id,
                      int part_number, const std::string& bytes) const;
  void complete_multipart_upload(const std::string& bucket, const std::string& key, const std::string& upload_id,
                                 const std::vector<s3_part>& parts) const;
  void abort_multipart_upload(const std::string& bucket, const std::string& key, const std::string& upload_id) const;

  // Uploads `path` as one object: a single PUT when it fits one part, else a multipart upload of
  // multipart_part_size(size, part_size)-byte parts (`part_size` at least 5 MiB, S3's minimum),
  // upload_streams of them in flight at once, the upload completed once every part was
  // acknowledged; on any error no further part is sent, the upload is aborted (best effort) and
  // the first error rethrown, so no object appears. `after_part(n, bytes)` (optional) runs once
  // parts 1..n were all acknowledged, for each n in order and one call at a time, from any of
  // the upload's threads (a single PUT is part 1): the upload's progress, and a test throws from
  // it to stand for a crash mid-upload.
  void upload_file(const std::string& bucket, const std::string& key, const std::string& path,
                   std::uint64_t part_size,
                   const std::function<void(int part, std::uint64_t bytes)>& after_part = {}) const;

 private:
  struct answer;
  answer send(const std::string& method, const std::string& bucket, const std::string& key,
              std::vector<std::pair<std::string, std::string>> query, const std::string& body,
              const std::vector<std::pair<std::string, std::string>>& extra_headers,
              const std::string& sink_path = "",
              const std::function<void(std::uint64_t)>& sink_bytes = {}) const;

  s3_config config_;
  bool tls_ = true;
  std::string host_;  // as in the Host header (with a non-default port)
  int port_ = 443;
  bool path_style_ = true;
};

}  // namespace cohort::core::storage

// S3 locations in a job spec ("s3://BUCKET[/PREFIX]": run.storage_path, data.train): the plain
// parsed form and its checks, shared by the spec parser and the S3 client (core/storage).
#pragma once

#include <string>

namespace cohort::config {

// "s3://BUCKET[/PREFIX]": the prefix has no leading or trailing slash ("" for the bucket root).
struct s3_url {
  std::string bucket;
  std::string prefix;
  std::string text() const { return "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix); }
  // The key of `name` under the prefix ("prefix/name").
  std::string key(const std::string& name) const { return prefix.empty() ? name : prefix + "/" + name; }
};

bool is_s3_url(const std::string& text);
// Throws std::invalid_argument naming `field`, the value and the allowed form for a bad URL (no
// bucket, a bucket name S3 does not allow, an empty path component).
s3_url parse_s3_url(const std::string& text, const std::string& field);

}  // namespace cohort::config

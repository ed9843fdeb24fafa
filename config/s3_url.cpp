// Parsing and checking s3:// locations of a job spec.
#include "config/s3_url.hpp"

#include <cctype>
#include <stdexcept>

namespace cohort::config {
namespace {

bool valid_bucket_name(const std::string& b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' ||
          c == '.'))
      return false;
  return std::isalnum(static_cast<unsigned char>(b.front())) && std::isalnum(static_cast<unsigned char>(b.back()));
}

}  // namespace

bool is_s3_url(const std::string& text) { return text.rfind("s3://", 0) == 0; }

s3_url parse_s3_url(const std::string& text, const std::string& field) {
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(field + ": \"" + text + "\" is not a usable S3 location (" + why +
                                 "); expected s3://BUCKET or s3://BUCKET/PREFIX");
  };
  if (!is_s3_url(text)) throw bad("it does not start with s3://");
  const std::string rest = text.substr(5);
  const auto slash = rest.find('/');
  s3_url out;
  out.bucket = rest.substr(0, slash);
  if (!valid_bucket_name(out.bucket))
    throw bad("the bucket name must be 3-63 characters of a-z, 0-9, '-' and '.', starting and ending with a letter "
              "or digit");
  if (slash != std::string::npos) {
    std::string prefix = rest.substr(slash + 1);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    if (prefix.find("//") != std::string::npos || (!prefix.empty() && prefix.front() == '/'))
      throw bad("the prefix has an empty path component");
    for (char c : prefix)
      if (static_cast<unsigned char>(c) < 0x20) throw bad("the prefix has a control character");
    out.prefix = prefix;
  }
  return out;
}

}  // namespace cohort::config

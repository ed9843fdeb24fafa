// Reads a tokenizer file whole and names its content by SHA-256 (see file_digest.hpp).
#include "core/tokenizer/file_digest.hpp"

#include <sodium.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw tokenizer_error("cannot open tokenizer file " + path + ": " + std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw tokenizer_error("cannot read tokenizer file " + path);
  return buffer.str();
}

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  static const char* const hex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof digest);
  for (const unsigned char b : digest) {
    out.push_back(hex[b >> 4]);
    out.push_back(hex[b & 0xF]);
  }
  return out;
}

std::string tokenizer_identity(const std::string& kind, const std::string& file_digest,
                               const std::vector<std::string>& runtime_added) {
  std::string id = kind + ":" + file_digest;
  if (!runtime_added.empty()) {
    std::string joined;
    for (const auto& t : runtime_added) joined += t + '\n';
    id += "+added:" + sha256_hex(joined).substr(0, 16);
  }
  return id;
}

}  // namespace cohort::core::tokenizer

// Reads a tokenizer file whole and names its content by SHA-256 (libsodium), for identity().
#pragma once

#include <string>

namespace cohort::core::tokenizer {

// The file's bytes; throws tokenizer_error naming the path when it cannot be read.
std::string read_file(const std::string& path);
// Lower-case hex SHA-256 of `bytes`.
std::string sha256_hex(const std::string& bytes);

}  // namespace cohort::core::tokenizer

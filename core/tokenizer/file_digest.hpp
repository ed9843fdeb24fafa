// Reads a tokenizer file whole and names its content by SHA-256 (libsodium), for identity().
#pragma once

#include <string>
#include <vector>

namespace cohort::core::tokenizer {

// The file's bytes; throws tokenizer_error naming the path when it cannot be read.
std::string read_file(const std::string& path);
// Lower-case hex SHA-256 of `bytes`.
std::string sha256_hex(const std::string& bytes);
// identity() of a tokenizer: "<kind>:<file digest>", plus "+added:<hash>" naming the tokens
// added at run time (in order), so data built with extra tokens never passes for plain data.
std::string tokenizer_identity(const std::string& kind, const std::string& file_digest,
                               const std::vector<std::string>& runtime_added);

}  // namespace cohort::core::tokenizer

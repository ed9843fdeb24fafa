// Standard base64 (RFC 4648, with padding) for binary state such as RNG states inside JSON.
#pragma once

#include <string>

namespace cohort::core::ckpt {

std::string base64_encode(const std::string& bytes);
// Throws ckpt_error(bad_manifest) naming `what` when the text is not valid base64.
std::string base64_decode(const std::string& text, const std::string& what);

}  // namespace cohort::core::ckpt

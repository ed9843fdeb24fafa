// The error type of cohort::core::model: what failed (a bad config.json, a bad safetensors file,
// bad input ids, an I/O failure) and a message naming the file, key or tensor involved.
#pragma once

#include <stdexcept>
#include <string>

namespace cohort::core::model {

enum class model_errc {
  bad_config,       // config.json missing, not JSON, a key missing or of the wrong type
  bad_safetensors,  // a weights file that breaks the safetensors format
  bad_weights,      // a tensor missing, unexpected, or of the wrong shape for the model
  bad_input,        // input ids or options out of range
  io,               // reading or writing a file failed
};

class model_error : public std::runtime_error {
 public:
  model_error(model_errc code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  model_errc code() const noexcept { return code_; }

 private:
  model_errc code_;
};

}  // namespace cohort::core::model

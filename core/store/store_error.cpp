// store_error (see store_error.hpp).
#include "core/store/store_error.hpp"

namespace cohort::core::store {

const char* to_string(store_error_kind kind) {
  switch (kind) {
    case store_error_kind::io:
      return "io";
    case store_error_kind::corrupt:
      return "corrupt";
    case store_error_kind::fenced:
      return "fenced";
    case store_error_kind::invalid:
      return "invalid";
    case store_error_kind::not_found:
      return "not_found";
  }
  return "unknown";
}

store_error::store_error(store_error_kind kind, std::string path, const std::string& message)
    : std::runtime_error("cluster store (" + std::string(to_string(kind)) + "): " + message),
      kind_(kind),
      path_(std::move(path)) {}

}  // namespace cohort::core::store

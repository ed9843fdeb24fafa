// The one error type of cohort::core::comm (stores and collectives) (see comm_error.hpp).
#include "core/comm/comm_error.hpp"

namespace cohort::core::comm {

const char* to_string(comm_errc code) {
  switch (code) {
    case comm_errc::invalid_argument: return "invalid argument";
    case comm_errc::timeout: return "timeout";
    case comm_errc::aborted: return "aborted";
    case comm_errc::peer_failure: return "peer failure";
    case comm_errc::store_failure: return "store failure";
    case comm_errc::backend_failure: return "backend failure";
  }
  return "unknown comm error";
}

}  // namespace cohort::core::comm

// The one error type of cohort::core::comm (stores and collectives): a code saying what kind of
// failure it was, so callers (the trainer) can tell a timeout or a dead peer from a bad argument.
#pragma once

#include <stdexcept>
#include <string>

namespace cohort::core::comm {

enum class comm_errc {
  invalid_argument,  // the caller passed something the operation cannot accept
  timeout,           // a key, a peer or an operation did not arrive in time
  aborted,           // the group was aborted (by abort(), a failure or destruction)
  peer_failure,      // a peer closed its connection or reported an error mid-operation
  store_failure,     // the rendezvous store is unreachable or answered something malformed
  backend_failure,   // the transport library (Gloo, NCCL, CUDA) reported an error
};

const char* to_string(comm_errc code);

class comm_error : public std::runtime_error {
 public:
  comm_error(comm_errc code, const std::string& what)
      : std::runtime_error(std::string(to_string(code)) + ": " + what), code_(code) {}
  comm_errc code() const { return code_; }

 private:
  comm_errc code_;
};

}  // namespace cohort::core::comm

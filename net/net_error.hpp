// Errors of the net layer: a socket, key or credentials problem, with a message that says what
// failed, where, and what to do.
#pragma once

#include <stdexcept>

namespace cohort::net {

// A transport problem: ZeroMQ refused a call, an address is bad, a port is taken.
struct net_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A credentials file or key is missing, unreadable or invalid.
struct credentials_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace cohort::net

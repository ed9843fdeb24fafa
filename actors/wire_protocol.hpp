// The codec of cohort's wire: every actor message and bridge message, registered once. Heads,
// cluster-workers and clients build theirs from here so they agree on type ids.
#pragma once

#include <memory>

#include "net/codec.hpp"

namespace cohort::actors {

std::shared_ptr<const net::wire_codec> make_wire_codec();

}  // namespace cohort::actors

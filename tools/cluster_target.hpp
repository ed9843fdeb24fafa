// Which cluster a client talks to and how it authenticates: the --address, --store and
// --credentials options that `submit` and `cohort-bench` take alike (with the same environment
// defaults), and the connection they open from them.
#pragma once

#include <memory>
#include <string>

#include <boost/program_options.hpp>

#include "tools/cluster_client.hpp"

namespace cohort::tools {

struct cluster_target {
  std::string address;      // HOST:PORT[,HOST:PORT...]; "" when not given
  std::string store;        // a store directory or etcd://...; "" when not given
  std::string credentials;  // the credentials file; "" when none was given or found
};

// Adds --address, --store and --credentials (their help text) to `options`.
void add_cluster_target_options(boost::program_options::options_description& options);

// Reads them: --address else $COHORT_ADDRESS; --credentials else $COHORT_CREDENTIALS, else the
// store directory's <store>/cluster/credentials.json. Throws std::invalid_argument, its message
// naming --store and what is allowed, for an etcd location that does not parse or an etcd store
// given without credentials (etcd keeps no keys).
cluster_target read_cluster_target(const boost::program_options::variables_map& vm);

// Connects to the target's leading head (127.0.0.1:7411 when neither an address nor a store
// tells where it is). Throws config::spec_error("--credentials") when there are no credentials,
// client_error when no head answers.
std::unique_ptr<cluster_client> connect(const cluster_target& target);

}  // namespace cohort::tools

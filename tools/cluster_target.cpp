// The cluster options a client takes, and the connection they open (see cluster_target.hpp).
#include "tools/cluster_target.hpp"

#include <optional>
#include <stdexcept>

#include "config/job_spec.hpp"
#include "core/store/cluster_store.hpp"
#include "core/store/etcd_client.hpp"
#include "net/credentials.hpp"
#include "tools/machine.hpp"

namespace po = boost::program_options;

namespace cohort::tools {

void add_cluster_target_options(po::options_description& options) {
  options.add_options()
      ("address", po::value<std::string>(),
       "the heads, HOST:PORT[,HOST:PORT...]: the one that leads answers (default $COHORT_ADDRESS, "
       "else the store's leader record, else 127.0.0.1:7411)")
      ("store", po::value<std::string>(),
       "the cluster store, when this client shares it: a directory (the leader is found from its "
       "leader record; the credentials default to <store>/cluster/credentials.json) or "
       "etcd://HOST:PORT[,HOST:PORT...][/prefix] (the leader is found from its leader key, after "
       "every failover; give --credentials)")
      ("credentials", po::value<std::string>(), "the cluster's credentials file (default $COHORT_CREDENTIALS)");
}

cluster_target read_cluster_target(const po::variables_map& vm) {
  cluster_target t;
  t.address = vm.count("address") ? vm["address"].as<std::string>() : env_or("COHORT_ADDRESS", "");
  t.store = vm.count("store") ? vm["store"].as<std::string>() : "";
  t.credentials = vm.count("credentials") ? vm["credentials"].as<std::string>()
                                          : env_or("COHORT_CREDENTIALS", "");
  if (core::store::is_etcd_location(t.store)) {
    try {
      core::store::parse_etcd_location(t.store);
    } catch (const std::exception& e) {
      throw std::invalid_argument("--store " + t.store + ": " + e.what() +
                                  " (allowed: etcd://HOST:PORT[,HOST:PORT...][/prefix] or a directory)");
    }
    // etcd keeps no keys: they lie where cluster-head's --keys-dir put them.
    if (t.credentials.empty())
      throw std::invalid_argument("--store " + t.store +
                                  " is an etcd store, which holds no credentials: give --credentials FILE (or "
                                  "set COHORT_CREDENTIALS), <keys-dir>/cluster/credentials.json of cluster-head");
  } else if (t.credentials.empty() && !t.store.empty()) {
    t.credentials = net::credentials_file_in(t.store).string();
  }
  return t;
}

std::unique_ptr<cluster_client> connect(const cluster_target& target) {
  constexpr const char* default_address = "127.0.0.1:7411";
  if (target.credentials.empty())
    throw config::spec_error("--credentials",
                             "no credentials: give --credentials FILE (or --store DIR) or set "
                             "COHORT_CREDENTIALS (cluster-head writes <store>/cluster/credentials.json)");
  std::optional<std::filesystem::path> store;
  if (!target.store.empty()) store = target.store;
  else store = store_of_credentials(target.credentials);
  return std::make_unique<cluster_client>(target.address.empty() && !store ? default_address : target.address,
                                          target.credentials, store);
}

}  // namespace cohort::tools

// The cluster store handle and the choice of backend (see cluster_store.hpp).
#include "core/store/cluster_store.hpp"

#include "core/store/directory_store.hpp"
#include "core/store/etcd_store.hpp"
#include "core/store/store_error.hpp"

namespace cohort::core::store {

namespace {

std::unique_ptr<store_backend> open_backend(const std::string& location, store_options options,
                                            clock_ms now) {
  if (location.empty())
    throw store_error(store_error_kind::invalid, "",
                      "store location is empty: give a directory or etcd://HOST:PORT[,...][/prefix]");
  if (is_etcd_location(location))
    return std::make_unique<etcd_store>(parse_etcd_location(location), options, std::move(now));
  return std::make_unique<directory_store>(location, options, std::move(now));
}

}  // namespace

cluster_store::cluster_store(std::filesystem::path location, store_options options, clock_ms now)
    : backend_(open_backend(location.string(), options, std::move(now))),
      location_(std::move(location)) {}

cluster_store::cluster_store(std::unique_ptr<store_backend> backend) : backend_(std::move(backend)) {
  if (!backend_)
    throw store_error(store_error_kind::invalid, "", "cluster_store needs a backend, got none");
  location_ = backend_->location();
}

bool is_etcd_location(const std::string& location) {
  return location.rfind("etcd://", 0) == 0 || location.rfind("etcds://", 0) == 0;
}

std::shared_ptr<cluster_store> open_cluster_store(const std::string& location,
                                                  store_options options, clock_ms now) {
  return std::make_shared<cluster_store>(std::filesystem::path(location), options, std::move(now));
}

}  // namespace cohort::core::store

// Lets Gloo bootstrap through any cohort store (see gloo_store_adapter.hpp).
#include "core/comm/gloo_store_adapter.hpp"

#include "core/comm/comm_error.hpp"

#include <algorithm>

namespace cohort::core::comm {

gloo_store_adapter::gloo_store_adapter(std::shared_ptr<store> inner, std::chrono::milliseconds timeout)
    : inner_(std::move(inner)), timeout_(timeout) {
  if (!inner_) throw comm_error(comm_errc::invalid_argument, "gloo_store_adapter: store is null");
}

void gloo_store_adapter::set(const std::string& key, const std::vector<char>& data) {
  inner_->set(key, std::string(data.begin(), data.end()));
}

std::vector<char> gloo_store_adapter::get(const std::string& key) {
  const std::string value = inner_->get(key, timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void gloo_store_adapter::wait(const std::vector<std::string>& keys) { inner_->wait(keys, timeout_); }

void gloo_store_adapter::wait(const std::vector<std::string>& keys,
                              const std::chrono::milliseconds& timeout) {
  // Gloo passes its context timeout; never wait past the group's own.
  inner_->wait(keys, std::min(timeout, timeout_));
}

}  // namespace cohort::core::comm

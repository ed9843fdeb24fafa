// Lets Gloo bootstrap (rendezvous::Context::connectFullMesh) through any cohort store: maps
// gloo::rendezvous::Store's calls onto store's, with the group's timeout on every wait.
#pragma once

#include "core/comm/store.hpp"

#include <gloo/rendezvous/store.h>

#include <memory>

namespace cohort::core::comm {

class gloo_store_adapter final : public gloo::rendezvous::Store {
 public:
  gloo_store_adapter(std::shared_ptr<store> inner, std::chrono::milliseconds timeout);
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<store> inner_;
  std::chrono::milliseconds timeout_;
};

}  // namespace cohort::core::comm

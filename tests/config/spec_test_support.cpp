// Test support for the config tests (see spec_test_support.hpp).
#include <nlohmann/json.hpp>

#include "tests/config/spec_test_support.hpp"

namespace cohort::config::testing {

std::string patched_spec(const std::string& json_patch) {
  nlohmann::json spec = {{"name", "job-1"},
                         {"model", {{"hf_dir", "models/tiny"}}},
                         {"data", {{"train", "data/train"}}}};
  spec.merge_patch(nlohmann::json::parse(json_patch));
  return spec.dump();
}

}  // namespace cohort::config::testing

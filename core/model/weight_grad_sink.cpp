// The registry of weight-gradient sinks (weight_grad_sink.hpp): a mutex over a list.
#include "core/model/weight_grad_sink.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

namespace cohort::core::model {

namespace {

std::mutex sinks_mutex;
std::vector<weight_grad_sink*> sinks;

}  // namespace

void add_weight_grad_sink(weight_grad_sink* sink) {
  const std::lock_guard<std::mutex> lock(sinks_mutex);
  sinks.push_back(sink);
}

void remove_weight_grad_sink(weight_grad_sink* sink) {
  const std::lock_guard<std::mutex> lock(sinks_mutex);
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
}

weight_grad_target weight_grad_target_of(const torch::Tensor& weights) {
  const std::lock_guard<std::mutex> lock(sinks_mutex);
  for (auto* sink : sinks) {
    auto target = sink->target_of(weights);
    if (target.grad.defined()) return target;
  }
  return {};
}

}  // namespace cohort::core::model

// Greedy and top-k / top-p generation with a KV cache (see generate.hpp).
#include "core/model/generate.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "core/model/decoder.hpp"
#include "core/model/model_error.hpp"

namespace cohort::core::model {
namespace {

torch::Tensor prompt_tensor(const decoder_impl& model, const std::vector<std::int64_t>& prompt) {
  if (prompt.empty()) throw model_error(model_errc::bad_input, "generation: the prompt has no tokens");
  const std::int64_t V = model.config().vocab_size;
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= V) {
      throw model_error(model_errc::bad_input, "generation: prompt token " + std::to_string(i) + " is " +
                                                   std::to_string(prompt[i]) + "; allowed: 0 to " +
                                                   std::to_string(V - 1) + " (vocab_size " +
                                                   std::to_string(V) + ")");
    }
  }
  return torch::tensor(prompt, torch::kInt64).view({1, -1});
}

bool stops(const std::vector<std::int64_t>& stop_ids, std::int64_t token) {
  return std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
}

// The next token from the logits (V) of the last position, fp32 on the host.
std::int64_t choose(torch::Tensor logits, const sampling_settings& s, at::Generator& gen) {
  if (s.greedy) return logits.argmax().item<std::int64_t>();
  logits = logits / s.temperature;
  const double minus_inf = -std::numeric_limits<double>::infinity();
  const std::int64_t V = logits.size(0);
  if (s.top_k > 0 && s.top_k < V) {  // TopKLogitsWarper: below the k-th largest goes
    const auto kth = std::get<0>(logits.topk(s.top_k)).min();
    logits = logits.masked_fill(logits < kth, minus_inf);
  }
  if (s.top_p < 1.0) {  // TopPLogitsWarper: the smallest tokens whose mass is at most 1 - top_p go
    auto sorted = logits.sort(/*dim=*/0, /*descending=*/false);
    const auto& values = std::get<0>(sorted);
    const auto& order = std::get<1>(sorted);
    auto cumulative = values.softmax(0).cumsum(0);
    auto remove = cumulative <= (1.0 - s.top_p);
    remove[V - 1] = false;  // the most likely token always stays
    logits = logits.scatter(0, order, values.masked_fill(remove, minus_inf));
  }
  return torch::multinomial(logits.softmax(0), 1, false, gen).item<std::int64_t>();
}

}  // namespace

void check_sampling(const sampling_settings& s) {
  if (s.max_new_tokens < 1)
    throw std::invalid_argument("max_new_tokens is " + std::to_string(s.max_new_tokens) + "; allowed: 1 or more");
  if (s.top_k < 0) throw std::invalid_argument("top_k is " + std::to_string(s.top_k) + "; allowed: 0 (off) or more");
  if (!(s.top_p > 0.0 && s.top_p <= 1.0))
    throw std::invalid_argument("top_p is " + std::to_string(s.top_p) + "; allowed: more than 0, at most 1");
  if (!(s.temperature > 0.0))
    throw std::invalid_argument("temperature is " + std::to_string(s.temperature) + "; allowed: more than 0");
}

std::vector<std::int64_t> generate(decoder_impl& model, const std::vector<std::int64_t>& prompt,
                                   const sampling_settings& settings) {
  check_sampling(settings);
  eval_scope mode(model);
  torch::NoGradGuard no_grad;
  const auto device = model.hf_parameters().front().tensor.device();
  auto gen = at::detail::createCPUGenerator(settings.seed);
  kv_cache cache;
  auto input = prompt_tensor(model, prompt).to(device);
  std::vector<std::int64_t> out;
  while (static_cast<std::int64_t>(out.size()) < settings.max_new_tokens) {
    auto logits = model.forward_cached(input, cache);  // (1, T, V)
    auto last = logits[0][logits.size(1) - 1].to(torch::kFloat).to(torch::kCPU);
    const std::int64_t token = choose(last, settings, gen);
    out.push_back(token);
    if (stops(settings.stop_ids, token)) break;
    input = torch::full({1, 1}, token, torch::TensorOptions().dtype(torch::kInt64).device(device));
  }
  return out;
}

std::vector<std::int64_t> generate_uncached_greedy(decoder_impl& model,
                                                   const std::vector<std::int64_t>& prompt,
                                                   std::int64_t max_new_tokens,
                                                   const std::vector<std::int64_t>& stop_ids) {
  eval_scope mode(model);
  torch::NoGradGuard no_grad;
  prompt_tensor(model, prompt);  // checks it
  std::vector<std::int64_t> sequence = prompt, out;
  while (static_cast<std::int64_t>(out.size()) < max_new_tokens) {
    auto logits = model.forward(torch::tensor(sequence, torch::kInt64).view({1, -1})).logits;
    const std::int64_t token = logits[0][logits.size(1) - 1].argmax().item<std::int64_t>();
    out.push_back(token);
    sequence.push_back(token);
    if (stops(stop_ids, token)) break;
  }
  return out;
}

}  // namespace cohort::core::model

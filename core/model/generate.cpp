// Greedy and top-k / top-p generation with a KV cache (see generate.hpp).
#include "core/model/generate.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#ifdef COHORT_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#endif

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

// The prompts (non-empty, of one length) as one (B, T) int64 tensor on the host.
torch::Tensor rows_tensor(const std::vector<std::vector<std::int64_t>>& prompts) {
  std::vector<std::int64_t> flat;
  for (const auto& p : prompts) flat.insert(flat.end(), p.begin(), p.end());
  return torch::tensor(flat, torch::kInt64).view({static_cast<std::int64_t>(prompts.size()), -1});
}

// The prompts' indices in batches: prompts of one length together, in the order their length
// first appears, at most `batch` to a batch.
std::vector<std::vector<std::size_t>> batches_by_length(const std::vector<std::vector<std::int64_t>>& prompts,
                                                        std::int64_t batch) {
  std::vector<std::vector<std::size_t>> groups;
  std::map<std::size_t, std::size_t> group_of_length;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto it = group_of_length.emplace(prompts[i].size(), groups.size()).first;
    if (it->second == groups.size()) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  std::vector<std::vector<std::size_t>> out;
  for (const auto& g : groups) {
    for (std::size_t i = 0; i < g.size(); i += static_cast<std::size_t>(batch))
      out.emplace_back(
          g.begin() + static_cast<std::ptrdiff_t>(i),
          g.begin() + static_cast<std::ptrdiff_t>(std::min(g.size(), i + static_cast<std::size_t>(batch))));
  }
  return out;
}

// One batch's forward passes: its prompts, then one new position a step. Each returns the
// logits (B, V) of the last position, on the device.
class batch_steps {
 public:
  virtual ~batch_steps() = default;
  virtual torch::Tensor prompt(const torch::Tensor& ids) = 0;   // (B, T) on the device
  virtual torch::Tensor next(const torch::Tensor& tokens) = 0;  // (B, 1), any device
  virtual bool captured() const { return false; }
};

// The growing cache: forward_cached, a new cache per batch.
class growing_steps : public batch_steps {
 public:
  explicit growing_steps(decoder_impl& model) : model_(model) {}
  torch::Tensor prompt(const torch::Tensor& ids) override { return last(model_.forward_cached(ids, cache_)); }
  torch::Tensor next(const torch::Tensor& tokens) override {
    return last(model_.forward_cached(tokens.to(model_.hf_parameters().front().tensor.device()), cache_));
  }

 private:
  static torch::Tensor last(const torch::Tensor& logits) { return logits.select(1, logits.size(1) - 1); }
  decoder_impl& model_;
  kv_cache cache_;
};

// The preallocated cache of one shape (rows, positions), kept for every batch of that shape: the
// step reads its token and position from tensors of its own, so that on CUDA it is captured once
// and replayed.
class preallocated_steps : public batch_steps {
 public:
  preallocated_steps(decoder_impl& model, std::int64_t rows, std::int64_t capacity,
                     const torch::Device& device)
      : model_(model),
        cache_(model.preallocated_cache(rows, capacity, device)),
        tokens_(torch::zeros({rows, 1}, torch::TensorOptions().dtype(torch::kInt64).device(device))),
        position_(torch::zeros({1}, tokens_.options())) {}

  torch::Tensor prompt(const torch::Tensor& ids) override {
    length_ = ids.size(1);
    return model_.forward_at(ids, torch::arange(length_, tokens_.options()), cache_).select(1, length_ - 1);
  }

  torch::Tensor next(const torch::Tensor& tokens) override {
    if (length_ >= cache_.capacity) throw std::logic_error("generation: the preallocated cache is full");
    tokens_.copy_(tokens);
    position_.fill_(length_++);
#ifdef COHORT_WITH_CUDA
    if (tokens_.is_cuda()) {
      if (!graph_) capture();
      graph_->replay();
      return logits_.select(1, 0);
    }
#endif
    return model_.forward_at(tokens_, position_, cache_).select(1, 0);
  }

  bool captured() const override {
#ifdef COHORT_WITH_CUDA
    return graph_ != nullptr;
#else
    return false;
#endif
  }

 private:
#ifdef COHORT_WITH_CUDA
  // The one-token step as a CUDA graph, captured on a side stream after one run there (the
  // libraries' lazy set-up stays outside the capture); that run computes what the first replay
  // does, so it changes nothing.
  void capture() {
    const auto current = at::cuda::getCurrentCUDAStream(tokens_.device().index());
    const auto side = at::cuda::getStreamFromPool(false, tokens_.device().index());
    at::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(side);
    {
      c10::cuda::CUDAStreamGuard guard(side);
      model_.forward_at(tokens_, position_, cache_);
      graph_ = std::make_unique<at::cuda::CUDAGraph>();
      graph_->capture_begin();
      logits_ = model_.forward_at(tokens_, position_, cache_);
      graph_->capture_end();
    }
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(current);
  }
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  torch::Tensor logits_;  // (B, 1, V): the graph's output
#endif
  decoder_impl& model_;
  kv_cache cache_;
  torch::Tensor tokens_, position_;  // (B, 1) and (1) int64: the step's input
  std::int64_t length_ = 0;          // positions written
};

// Each row's next token from the last position's logits (B, V): on the device for greedy
// decoding, through the host for a draw. {host tokens, the same as (B, 1) for the next step}.
std::pair<std::vector<std::int64_t>, torch::Tensor> choose_rows(const torch::Tensor& logits,
                                                                const sampling_settings& s,
                                                                at::Generator& gen) {
  if (s.greedy) {
    auto next = logits.argmax(-1);
    auto host = next.to(torch::kCPU);
    return {std::vector<std::int64_t>(host.data_ptr<std::int64_t>(),
                                      host.data_ptr<std::int64_t>() + host.numel()),
            next.view({-1, 1})};
  }
  auto host = logits.to(torch::kFloat).to(torch::kCPU);
  std::vector<std::int64_t> tokens;
  for (std::int64_t r = 0; r < host.size(0); ++r) tokens.push_back(choose(host[r], s, gen));
  return {tokens, torch::tensor(tokens, torch::kInt64).view({-1, 1})};
}

// One batch from its prompts `ids` (B, T) on the model's device to every row's new tokens.
std::vector<std::vector<std::int64_t>> generate_rows(batch_steps& steps, const torch::Tensor& ids,
                                                     const sampling_settings& s, generation_stats& stats) {
  using clock = std::chrono::steady_clock;
  const std::int64_t B = ids.size(0);
  auto gen = at::detail::createCPUGenerator(s.seed);
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(B));
  std::vector<bool> ended(static_cast<std::size_t>(B), false);
  std::int64_t running = B;
  const auto start = clock::now();
  auto logits = steps.prompt(ids);
  auto first = start;
  for (std::int64_t step = 0;; ++step) {
    auto [tokens, next] = choose_rows(logits, s, gen);
    for (std::size_t r = 0; r < out.size(); ++r) {
      if (ended[r]) continue;
      out[r].push_back(tokens[r]);
      if (stops(s.stop_ids, tokens[r])) ended[r] = true, --running;
    }
    if (step == 0) first = clock::now();
    if (running == 0 || step + 1 == s.max_new_tokens) break;
    logits = steps.next(next);
  }
  const auto end = clock::now();
  stats.rows = B;
  stats.prompt_tokens = ids.size(1);
  for (const auto& row : out) stats.new_tokens += static_cast<std::int64_t>(row.size());
  stats.prefill_s = std::chrono::duration<double>(first - start).count();
  stats.decode_s = std::chrono::duration<double>(end - first).count();
  stats.cuda_graph = steps.captured();
  return out;
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
  return generate_all(model, {prompt}, settings).front();
}

std::vector<std::vector<std::int64_t>> generate_all(
    decoder_impl& model, const std::vector<std::vector<std::int64_t>>& prompts,
    const sampling_settings& settings, std::int64_t batch,
    const std::function<void(const generation_stats&)>& on_batch) {
  check_sampling(settings);
  if (batch < 1) throw std::invalid_argument("batch is " + std::to_string(batch) + "; allowed: 1 or more");
  for (const auto& prompt : prompts) prompt_tensor(model, prompt);  // every prompt checked first
  eval_scope mode(model);
  torch::NoGradGuard no_grad;
  const auto device = model.hf_parameters().front().tensor.device();
  const bool preallocate = settings.cache == cache_layout::preallocated ||
                           (settings.cache == cache_layout::automatic && device.is_cuda());
  std::map<std::pair<std::int64_t, std::int64_t>, std::unique_ptr<preallocated_steps>> shapes;
  std::vector<std::vector<std::int64_t>> out(prompts.size());
  for (const auto& rows : batches_by_length(prompts, batch)) {
    std::vector<std::vector<std::int64_t>> batch_prompts;
    for (std::size_t i : rows) batch_prompts.push_back(prompts[i]);
    const auto B = static_cast<std::int64_t>(rows.size());
    const auto T = static_cast<std::int64_t>(batch_prompts.front().size());
    growing_steps growing(model);
    batch_steps* steps = &growing;
    if (preallocate) {
      auto& shape = shapes[{B, T + settings.max_new_tokens - 1}];
      if (!shape)
        shape = std::make_unique<preallocated_steps>(model, B, T + settings.max_new_tokens - 1, device);
      steps = shape.get();
    }
    generation_stats stats;
    auto tokens = generate_rows(*steps, rows_tensor(batch_prompts).to(device), settings, stats);
    for (std::size_t r = 0; r < rows.size(); ++r) out[rows[r]] = std::move(tokens[r]);
    if (on_batch) on_batch(stats);
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

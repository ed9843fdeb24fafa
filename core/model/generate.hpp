// Text generation from a decoder with a KV cache: greedy decoding and top-k / top-p sampling, as
// transformers' generate() does (temperature, then top-k, then top-p, then a draw; greedy takes
// the argmax of the raw logits), for prompts of one length in a batch. Torch-free header: tools
// include it for the settings.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cohort::core::model {

class decoder_impl;

// How the keys and values are kept. growing: each step appends its position (transformers'
// dynamic cache). preallocated: every position the batch will reach is allocated before the
// prompt and written in place (its static cache); on CUDA the one-token step is then captured
// once as a CUDA graph and replayed for every later token and batch of the same shape.
// automatic: preallocated on CUDA, growing elsewhere.
enum class cache_layout { automatic, growing, preallocated };

struct sampling_settings {
  std::int64_t max_new_tokens = 32;  // >= 1
  bool greedy = true;                // false: draw from the filtered distribution
  std::int64_t top_k = 0;            // >= 0; 0 keeps every token
  double top_p = 1.0;                // in (0, 1]; 1 keeps every token
  double temperature = 1.0;          // > 0
  std::uint64_t seed = 0;            // the draws' generator (same seed, same tokens on one device)
  // Generation ends after one of these is produced (the model's eos_token_id); it is returned.
  std::vector<std::int64_t> stop_ids;
  cache_layout cache = cache_layout::automatic;
};

// What one batch took. new_tokens counts each row's tokens up to and with its stop token.
struct generation_stats {
  std::int64_t rows = 0;
  std::int64_t prompt_tokens = 0;  // per row
  std::int64_t new_tokens = 0;     // all rows'
  double prefill_s = 0;            // the prompt's forward and the first token's choice
  double decode_s = 0;             // every later token
  bool cuda_graph = false;         // the one-token step replayed a captured CUDA graph
};

// Throws std::invalid_argument naming the setting and what is allowed.
void check_sampling(const sampling_settings& s);

// The tokens that follow `prompt` (non-empty ids of the model's vocabulary), at most
// max_new_tokens of them. The prompt is run once, then one position per new token through
// decoder_impl::forward_cached. The model runs in eval mode (no dropout) and without gradients;
// its mode is restored afterwards. Throws model_error (bad_input) for a bad prompt or a sequence
// longer than a learned-position model allows.
std::vector<std::int64_t> generate(decoder_impl& model, const std::vector<std::int64_t>& prompt,
                                   const sampling_settings& settings);

// generate() for many prompts, in their order: prompts of one length run together as the rows of
// a batch, at most `batch` rows at a time (the model loaded once, a CUDA graph captured once per
// shape). A row ends at its stop token; the batch goes on until every row ended or produced
// max_new_tokens. Greedy rows are the tokens each prompt gets alone (up to the order of sums in
// batched products); sampled rows draw from one generator seeded once per batch, row by row,
// so a batch of one draws as generate() does. on_batch, when given, hears each batch's figures.
std::vector<std::vector<std::int64_t>> generate_all(
    decoder_impl& model, const std::vector<std::vector<std::int64_t>>& prompts,
    const sampling_settings& settings, std::int64_t batch = 1,
    const std::function<void(const generation_stats&)>& on_batch = {});

// The same without a cache: every step runs the whole sequence so far through forward() and
// takes its last position. Greedy only; the reference the cached path is tested against.
std::vector<std::int64_t> generate_uncached_greedy(decoder_impl& model,
                                                   const std::vector<std::int64_t>& prompt,
                                                   std::int64_t max_new_tokens,
                                                   const std::vector<std::int64_t>& stop_ids = {});

}  // namespace cohort::core::model

// Text generation from a decoder with a KV cache: greedy decoding and top-k / top-p sampling, as
// transformers' generate() does for a batch of one sequence (temperature, then top-k, then
// top-p, then a draw; greedy takes the argmax of the raw logits). Torch-free header: tools
// include it for the settings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::core::model {

class decoder_impl;

struct sampling_settings {
  std::int64_t max_new_tokens = 32;  // >= 1
  bool greedy = true;                // false: draw from the filtered distribution
  std::int64_t top_k = 0;            // >= 0; 0 keeps every token
  double top_p = 1.0;                // in (0, 1]; 1 keeps every token
  double temperature = 1.0;          // > 0
  std::uint64_t seed = 0;            // the draws' generator (same seed, same tokens on one device)
  // Generation ends after one of these is produced (the model's eos_token_id); it is returned.
  std::vector<std::int64_t> stop_ids;
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

// The same without a cache: every step runs the whole sequence so far through forward() and
// takes its last position. Greedy only; the reference the cached path is tested against.
std::vector<std::int64_t> generate_uncached_greedy(decoder_impl& model,
                                                   const std::vector<std::int64_t>& prompt,
                                                   std::int64_t max_new_tokens,
                                                   const std::vector<std::int64_t>& stop_ids = {});

}  // namespace cohort::core::model

// Whole-model operations on Hugging Face directories behind a torch-free interface, for tools
// and tests: evaluate a batch, take one clipped AdamW step, describe a model's memory needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/generate.hpp"

namespace cohort::core::model {

using token_rows = std::vector<std::vector<std::int64_t>>;  // (B, T)

// Reads {"input_ids": [[...], ...]} (equal-length rows of token ids; a fixture's reference.json
// works as is). Throws model_error (bad_input) naming the file and the fault.
token_rows read_input_ids(const std::string& path);

struct eval_result {
  double loss = 0.0;  // causal LM loss with labels = input ids
  std::int64_t batch = 0, time = 0, vocab = 0;
  std::vector<float> logits;  // (B, T, V) fp32, row-major
};

// Loads DIR in fp32 and runs one forward pass.
eval_result evaluate(const std::string& hf_dir, const token_rows& ids);

struct step_settings {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  double grad_clip = 0.0;  // <= 0: no clipping
};

struct step_result {
  double loss = 0.0;
  double grad_norm = 0.0;  // before clipping
};

// Loads DIR in fp32, takes one AdamW step on labels = input ids after clip_grad_norm_ (dropout
// off, so the step is reproducible), and
// writes OUT_DIR as a Hugging Face directory (in DIR's dtype, with DIR's tokenizer files).
step_result train_one_step(const std::string& hf_dir, const token_rows& ids,
                           const step_settings& settings, const std::string& out_dir);

// The eos_token_id of DIR's generation_config.json, else of its config.json (a number or a list;
// none: empty). Throws model_error (bad_input) for a value that is neither.
std::vector<std::int64_t> read_eos_ids(const std::string& hf_dir);

// Loads DIR in fp32 on the host and generates after `prompt` (core/model/generate.hpp); the
// settings' stop_ids are used as given.
std::vector<std::int64_t> generate_from_dir(const std::string& hf_dir, const std::vector<std::int64_t>& prompt,
                                            const sampling_settings& settings);

// Family, parameter count and bytes of weights, gradients and optimizer state per precision
// (fp32; bf16 with fp32 master weights), from config.json alone.
nlohmann::json describe(const std::string& hf_dir);

}  // namespace cohort::core::model

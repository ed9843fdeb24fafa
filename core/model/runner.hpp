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

// A batch as the tools read it from one JSON file. Decoders use input_ids alone (labels = input
// ids); T5 takes the encoder's input_ids, their attention_mask (0/1, input_ids' shape; absent:
// all ones) and the decoder's labels (equal-length rows, -100 = ignored), its decoder input being
// the labels shifted right from decoder_start_token_id.
struct model_inputs {
  token_rows input_ids;
  token_rows attention_mask;  // empty when the file has none
  token_rows labels;          // empty when the file has none
  std::string origin;         // the file, for messages
};
// Reads input_ids (as read_input_ids) and, where present, attention_mask and labels. Throws
// model_error (bad_input) naming the file, the key and the fault.
model_inputs read_model_inputs(const std::string& path);

struct eval_result {
  double loss = 0.0;  // causal LM loss with labels = input ids; T5: the labels' cross-entropy
  std::int64_t batch = 0, time = 0, vocab = 0;
  std::vector<float> logits;  // (B, T, V) fp32, row-major; T5: T = the labels' length
};

// Loads DIR in fp32 and runs one forward pass. A T5 DIR needs labels (model_error bad_input
// naming the file otherwise).
eval_result evaluate(const std::string& hf_dir, const model_inputs& inputs);
eval_result evaluate(const std::string& hf_dir, const token_rows& ids);  // a decoder on ids

struct step_settings {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  double grad_clip = 0.0;  // <= 0: no clipping
};

struct step_result {
  double loss = 0.0;
  double grad_norm = 0.0;  // before clipping
};

// Loads DIR in fp32, takes one AdamW step on labels = input ids (T5: on its labels, with the
// attention mask) after clip_grad_norm_ (dropout off, so the step is reproducible), and
// writes OUT_DIR as a Hugging Face directory (in DIR's dtype, with DIR's tokenizer files).
step_result train_one_step(const std::string& hf_dir, const model_inputs& inputs,
                           const step_settings& settings, const std::string& out_dir);

// A sequence classifier DIR (config.json's architectures …ForSequenceClassification: a reward
// model's export) loaded in fp32: each row's num_labels scores at its last token that is not
// pad_token_id (decoder_impl::sequence_scores), as transformers' model(input_ids).logits gives
// them. Throws model_error (bad_input) for a DIR with an LM head.
std::vector<std::vector<double>> score_rows(const std::string& hf_dir, const token_rows& ids);

// The eos_token_id of DIR's generation_config.json, else of its config.json (a number or a list;
// none: empty). Throws model_error (bad_input) for a value that is neither.
std::vector<std::int64_t> read_eos_ids(const std::string& hf_dir);

// Where and how generate_from_dir runs the model.
struct generation_placement {
  std::string device = "cpu";  // "cpu", "cuda" or "cuda:N"
  std::string dtype = "fp32";  // "fp32", "bf16" or "fp16": the weights and activations
  std::int64_t batch = 1;      // rows at most per batch (generate_all)
};

// Loads DIR once as `placement` says and generates after every prompt (generate_all): one list
// of new tokens per prompt, in order. The settings' stop_ids are used as given; a sampling seed
// applies to each batch alike. Throws model_error (bad_input) naming a device or dtype that is
// not allowed, or a CUDA device this build or machine does not have.
std::vector<std::vector<std::int64_t>> generate_from_dir(
    const std::string& hf_dir, const std::vector<std::vector<std::int64_t>>& prompts,
    const sampling_settings& settings, const generation_placement& placement = {},
    const std::function<void(const generation_stats&)>& on_batch = {});

// Family, parameter count and bytes of weights, gradients and optimizer state per precision
// (fp32; bf16 with fp32 master weights), from config.json alone. T5 adds encoder_layers and
// decoder_layers (layers is their sum).
nlohmann::json describe(const std::string& hf_dir);

}  // namespace cohort::core::model

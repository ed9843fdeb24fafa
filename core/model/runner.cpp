// The runner's operations, built from the decoder, T5, hf_io and adamw units.
#include "core/model/runner.hpp"

#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include <torch/cuda.h>
#include <torch/utils.h>

#include "core/model/adamw.hpp"
#include "core/model/decoder.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/model_error.hpp"
#include "core/model/t5.hpp"

namespace cohort::core::model {
namespace {

torch::Tensor to_tensor(const token_rows& ids) {
  if (ids.empty() || ids.front().empty()) {
    throw model_error(model_errc::bad_input, "input_ids must hold at least one non-empty row");
  }
  const auto B = static_cast<std::int64_t>(ids.size());
  const auto T = static_cast<std::int64_t>(ids.front().size());
  auto t = torch::empty({B, T}, torch::kInt64);
  auto acc = t.accessor<std::int64_t, 2>();
  for (std::int64_t b = 0; b < B; ++b) {
    if (static_cast<std::int64_t>(ids[b].size()) != T) {
      throw model_error(model_errc::bad_input, "input_ids rows must have equal lengths: row " +
                                                   std::to_string(b) + " has " +
                                                   std::to_string(ids[b].size()) + ", row 0 has " +
                                                   std::to_string(T));
    }
    for (std::int64_t i = 0; i < T; ++i) acc[b][i] = ids[b][i];
  }
  return t;
}

}  // namespace

namespace {

// The rows of integer lists under `key`, equal in length. Errors name the file and the entry.
token_rows read_rows(const nlohmann::json& j, const char* key, const std::string& path) {
  const std::string want = std::string(": expected {\"") + key + "\": [[id, ...], ...]}";
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->empty()) {
    throw model_error(model_errc::bad_input, path + ": missing or empty key '" + key + "'" + want);
  }
  token_rows rows;
  for (std::size_t b = 0; b < it->size(); ++b) {
    const auto& row = (*it)[b];
    const std::string at = std::string(key) + "[" + std::to_string(b) + "]";
    if (!row.is_array() || row.empty()) {
      throw model_error(model_errc::bad_input, path + ": " + at + " is not a non-empty list" + want);
    }
    rows.emplace_back();
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (!row[i].is_number_integer()) {
        throw model_error(model_errc::bad_input, path + ": " + at + "[" + std::to_string(i) + "] is not an integer");
      }
      rows.back().push_back(row[i].get<std::int64_t>());
    }
    if (rows.back().size() != rows.front().size()) {
      throw model_error(model_errc::bad_input, path + ": " + key + " rows must have equal lengths (row " +
                                                   std::to_string(b) + ")");
    }
  }
  return rows;
}

nlohmann::json read_json_object(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw model_error(model_errc::bad_input, path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw model_error(model_errc::bad_input, path + ": not a JSON object: expected {\"input_ids\": [[id, ...], ...]}");
  }
  return j;
}

}  // namespace

token_rows read_input_ids(const std::string& path) { return read_rows(read_json_object(path), "input_ids", path); }

model_inputs read_model_inputs(const std::string& path) {
  const auto j = read_json_object(path);
  model_inputs in;
  in.origin = path;
  in.input_ids = read_rows(j, "input_ids", path);
  if (j.contains("attention_mask")) {
    in.attention_mask = read_rows(j, "attention_mask", path);
    const bool shaped = in.attention_mask.size() == in.input_ids.size() &&
                        in.attention_mask.front().size() == in.input_ids.front().size();
    if (!shaped) {
      throw model_error(model_errc::bad_input, path + ": attention_mask must have the shape of input_ids");
    }
    for (const auto& row : in.attention_mask) {
      for (auto m : row) {
        if (m == 0 || m == 1) continue;
        throw model_error(model_errc::bad_input,
                          path + ": attention_mask holds " + std::to_string(m) + "; allowed: 0, 1");
      }
    }
  }
  if (j.contains("labels")) in.labels = read_rows(j, "labels", path);
  return in;
}

namespace {

// A T5 batch: input ids, attention mask (undefined: none) and labels, which T5 needs.
struct t5_batch {
  torch::Tensor ids, mask, labels;
};

t5_batch t5_tensors(const model_inputs& in) {
  if (in.labels.empty()) {
    throw model_error(model_errc::bad_input, in.origin + ": a T5 model needs the decoder's 'labels' "
                                                         "beside 'input_ids': {\"input_ids\": [[...]], "
                                                         "\"labels\": [[...]]} (-100 = ignored)");
  }
  return {to_tensor(in.input_ids), in.attention_mask.empty() ? torch::Tensor() : to_tensor(in.attention_mask),
          to_tensor(in.labels)};
}

eval_result to_eval_result(const torch::Tensor& loss, const torch::Tensor& logits_any) {
  eval_result r;
  r.loss = loss.item<double>();
  auto logits = logits_any.to(torch::kFloat).contiguous();
  r.batch = logits.size(0), r.time = logits.size(1), r.vocab = logits.size(2);
  r.logits.assign(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
  return r;
}

// One torch.optim.AdamW step on `params` after clip_grad_norm_, the gradients those of `loss`.
step_result adamw_one_step(const std::vector<hf_parameter>& weights,
                           const std::function<torch::Tensor()>& loss, const step_settings& s) {
  std::vector<torch::Tensor> params;
  for (const auto& p : weights) params.push_back(p.tensor);
  for (auto& p : params) p.set_requires_grad(true);
  const auto value = loss();
  value.backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : params) grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  step_result r;
  r.loss = value.item<double>();
  r.grad_norm = s.grad_clip > 0 ? clip_grad_norm(grads, s.grad_clip) : std::sqrt(grad_square_sum(grads));
  const adamw_options o{s.lr, s.beta1, s.beta2, s.eps, s.weight_decay};
  for (std::size_t i = 0; i < params.size(); ++i) {
    adamw_state state;
    adamw_step(params[i], grads[i], state, o);
  }
  return r;
}

bool is_t5_dir(const std::string& hf_dir) { return is_t5(read_config_json(hf_dir)); }

}  // namespace

eval_result evaluate(const std::string& hf_dir, const model_inputs& inputs) {
  torch::NoGradGuard no_grad;
  if (is_t5_dir(hf_dir)) {
    const auto b = t5_tensors(inputs);  // before the load: bad input costs nothing
    auto model = load_t5_model(hf_dir, {torch::kFloat});
    const auto out = model->forward(b.ids, b.mask, b.labels);
    return to_eval_result(out.loss, out.logits);
  }
  auto model = load_hf_model(hf_dir, {torch::kFloat});
  auto input = to_tensor(inputs.input_ids);
  auto out = model->forward(input, input);
  return to_eval_result(out.loss, out.logits);
}

eval_result evaluate(const std::string& hf_dir, const token_rows& ids) {
  return evaluate(hf_dir, model_inputs{ids, {}, {}, "input ids"});
}

std::vector<std::vector<double>> score_rows(const std::string& hf_dir, const token_rows& ids) {
  torch::NoGradGuard no_grad;
  auto model = load_hf_model(hf_dir, {torch::kFloat});
  if (model->config().num_labels == 0)
    throw model_error(model_errc::bad_input, hf_dir + "/config.json: a causal LM (architectures " +
                                                 architecture_name(model->config().fam) +
                                                 "); score reads a …ForSequenceClassification, such as a "
                                                 "reward model's export");
  const auto input = to_tensor(ids);
  auto x = model->embed(input);
  const auto ctx = model->context(input.size(1), input.device());
  for (auto layer : model->layers()) x = layer->forward(x, ctx);
  const auto scores = model->sequence_scores(x, input).to(torch::kDouble).contiguous();  // (B, num_labels)
  std::vector<std::vector<double>> out(static_cast<std::size_t>(scores.size(0)));
  for (std::int64_t b = 0; b < scores.size(0); ++b)
    for (std::int64_t l = 0; l < scores.size(1); ++l)
      out[static_cast<std::size_t>(b)].push_back(scores[b][l].item<double>());
  return out;
}

std::vector<std::int64_t> read_eos_ids(const std::string& hf_dir) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::string path = hf_dir + "/" + name;
    std::ifstream in(path);
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    const auto j = nlohmann::json::parse(text.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw model_error(model_errc::bad_input, path + ": not a JSON object");
    const auto it = j.find("eos_token_id");
    if (it == j.end() || it->is_null()) continue;
    std::vector<std::int64_t> ids;
    if (it->is_number_integer()) ids.push_back(it->get<std::int64_t>());
    else if (it->is_array()) {
      for (const auto& v : *it) {
        if (!v.is_number_integer()) throw model_error(model_errc::bad_input, path + ": eos_token_id holds a non-integer");
        ids.push_back(v.get<std::int64_t>());
      }
    } else {
      throw model_error(model_errc::bad_input, path + ": eos_token_id must be an integer or a list of integers");
    }
    return ids;
  }
  return {};
}

namespace {

// generate_from_dir's placement as load options, checked.
load_options generation_load(const generation_placement& p) {
  if (p.dtype != "fp32" && p.dtype != "bf16" && p.dtype != "fp16")
    throw model_error(model_errc::bad_input, "dtype '" + p.dtype + "'; allowed: fp32, bf16, fp16");
  if (p.batch < 1)
    throw model_error(model_errc::bad_input, "batch " + std::to_string(p.batch) + "; allowed: 1 or more");
  const bool cuda = p.device == "cuda" || p.device.rfind("cuda:", 0) == 0;
  if (p.device != "cpu" && !cuda)
    throw model_error(model_errc::bad_input, "device '" + p.device + "'; allowed: cpu, cuda, cuda:N");
  if (cuda && !torch::cuda::is_available())
    throw model_error(model_errc::bad_input,
                      "device '" + p.device + "': this build or machine has no CUDA device");
  std::optional<torch::Device> device;
  try {
    device = torch::Device(p.device);
  } catch (const c10::Error&) {
    throw model_error(model_errc::bad_input, "device '" + p.device + "'; allowed: cpu, cuda, cuda:N");
  }
  const auto count = torch::cuda::device_count();
  if (device->has_index() && device->index() >= static_cast<int>(count))
    throw model_error(model_errc::bad_input, "device '" + p.device + "': this machine has " +
                                                 std::to_string(count) + " CUDA devices");
  return {dtype_from_name(p.dtype), *device};
}

}  // namespace

std::vector<std::vector<std::int64_t>> generate_from_dir(
    const std::string& hf_dir, const std::vector<std::vector<std::int64_t>>& prompts,
    const sampling_settings& settings, const generation_placement& placement,
    const std::function<void(const generation_stats&)>& on_batch) {
  check_sampling(settings);  // before the load: a bad option costs nothing
  const auto options = generation_load(placement);
  auto model = load_hf_model(hf_dir, options);
  return generate_all(*model, prompts, settings, placement.batch, on_batch);
}

step_result train_one_step(const std::string& hf_dir, const model_inputs& inputs,
                           const step_settings& s, const std::string& out_dir) {
  save_options so;
  so.copy_files_from = hf_dir;
  if (is_t5_dir(hf_dir)) {
    so.dtype = dtype_from_name(read_t5_config(hf_dir).dtype);
    const auto b = t5_tensors(inputs);
    auto model = load_t5_model(hf_dir, {torch::kFloat});
    const auto r = adamw_one_step(model->hf_parameters(),
                                  [&] { return model->forward(b.ids, b.mask, b.labels).loss; }, s);
    save_t5_model(*model, out_dir, so);
    return r;
  }
  so.dtype = dtype_from_name(read_config(hf_dir).dtype);
  auto model = load_hf_model(hf_dir, {torch::kFloat});
  auto input = to_tensor(inputs.input_ids);
  const auto r = adamw_one_step(model->hf_parameters(), [&] { return model->forward(input, input).loss; }, s);
  save_hf_model(*model, out_dir, so);
  return r;
}

namespace {

// Bytes of weights, gradients and optimizer state of `n` parameters per precision.
nlohmann::json memory_bytes(std::int64_t n) {
  const auto bytes = [n](std::int64_t per) { return n * per; };
  return {{"fp32",
           {{"weights", bytes(4)}, {"gradients", bytes(4)}, {"optimizer_state", bytes(8)},
            {"total", bytes(16)}}},
          {"bf16_fp32_master",
           {{"weights", bytes(2)}, {"master_weights", bytes(4)}, {"gradients", bytes(2)},
            {"optimizer_state", bytes(8)}, {"total", bytes(16)}}}};
}

}  // namespace

nlohmann::json describe(const std::string& hf_dir) {
  if (is_t5_dir(hf_dir)) {
    const t5_config cfg = read_t5_config(hf_dir);
    t5_model shapes(cfg, torch::TensorOptions().device(torch::kMeta));
    const std::int64_t n = shapes->parameter_count();
    return {
        {"family", "t5"},
        {"architecture", "T5ForConditionalGeneration"},
        {"parameters", n},
        {"layers", cfg.num_layers + cfg.num_decoder_layers},
        {"encoder_layers", cfg.num_layers},
        {"decoder_layers", cfg.num_decoder_layers},
        {"hidden_size", cfg.d_model},
        {"vocab_size", cfg.vocab_size},
        {"feed_forward_proj", cfg.feed_forward_proj},
        {"tie_word_embeddings", cfg.tie_word_embeddings},
        {"scale_decoder_outputs", cfg.scale_decoder_outputs},
        {"dtype", cfg.dtype},
        {"bytes", memory_bytes(n)},
    };
  }
  const model_config cfg = read_config(hf_dir);
  decoder shapes(cfg, torch::TensorOptions().device(torch::kMeta), false);
  const std::int64_t n = shapes->parameter_count();
  return {
      {"family", family_name(cfg.fam)},
      {"architecture",
       cfg.num_labels > 0 ? classifier_architecture_name(cfg.fam) : architecture_name(cfg.fam)},
      {"parameters", n},
      {"layers", cfg.num_layers},
      {"hidden_size", cfg.hidden_size},
      {"vocab_size", cfg.vocab_size},
      {"tie_word_embeddings", cfg.tie_word_embeddings},
      {"dtype", cfg.dtype},
      {"bytes", memory_bytes(n)},
  };
}

}  // namespace cohort::core::model

// The runner's operations, built from the decoder, hf_io and adamw units.
#include "core/model/runner.hpp"

#include <fstream>
#include <sstream>

#include <torch/utils.h>

#include "core/model/adamw.hpp"
#include "core/model/decoder.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/model_error.hpp"

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

token_rows read_input_ids(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw model_error(model_errc::bad_input, path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  const std::string want = ": expected {\"input_ids\": [[id, ...], ...]}";
  if (j.is_discarded() || !j.is_object()) throw model_error(model_errc::bad_input, path + ": not a JSON object" + want);
  auto it = j.find("input_ids");
  if (it == j.end() || !it->is_array() || it->empty()) {
    throw model_error(model_errc::bad_input, path + ": missing or empty key 'input_ids'" + want);
  }
  token_rows rows;
  for (std::size_t b = 0; b < it->size(); ++b) {
    const auto& row = (*it)[b];
    if (!row.is_array() || row.empty()) {
      throw model_error(model_errc::bad_input, path + ": input_ids[" + std::to_string(b) + "] is not a non-empty list" + want);
    }
    rows.emplace_back();
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (!row[i].is_number_integer()) {
        throw model_error(model_errc::bad_input, path + ": input_ids[" + std::to_string(b) + "][" +
                                                     std::to_string(i) + "] is not an integer");
      }
      rows.back().push_back(row[i].get<std::int64_t>());
    }
    if (rows.back().size() != rows.front().size()) {
      throw model_error(model_errc::bad_input, path + ": input_ids rows must have equal lengths (row " +
                                                   std::to_string(b) + ")");
    }
  }
  return rows;
}

eval_result evaluate(const std::string& hf_dir, const token_rows& ids) {
  auto model = load_hf_model(hf_dir, {torch::kFloat});
  auto input = to_tensor(ids);
  torch::NoGradGuard no_grad;
  auto out = model->forward(input, input);
  eval_result r;
  r.loss = out.loss.item<double>();
  auto logits = out.logits.to(torch::kFloat).contiguous();
  r.batch = logits.size(0), r.time = logits.size(1), r.vocab = logits.size(2);
  r.logits.assign(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
  return r;
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

std::vector<std::int64_t> generate_from_dir(const std::string& hf_dir, const std::vector<std::int64_t>& prompt,
                                            const sampling_settings& settings) {
  check_sampling(settings);  // before the load: a bad option costs nothing
  auto model = load_hf_model(hf_dir, {torch::kFloat});
  return generate(*model, prompt, settings);
}

step_result train_one_step(const std::string& hf_dir, const token_rows& ids,
                           const step_settings& s, const std::string& out_dir) {
  const model_config source = read_config(hf_dir);
  auto model = load_hf_model(hf_dir, {torch::kFloat});
  auto input = to_tensor(ids);
  std::vector<torch::Tensor> params;
  for (const auto& p : model->hf_parameters()) params.push_back(p.tensor);
  for (auto& p : params) p.set_requires_grad(true);
  auto out = model->forward(input, input);
  out.loss.backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : params) grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  step_result r;
  r.loss = out.loss.item<double>();
  r.grad_norm = s.grad_clip > 0 ? clip_grad_norm(grads, s.grad_clip) : std::sqrt(grad_square_sum(grads));
  const adamw_options o{s.lr, s.beta1, s.beta2, s.eps, s.weight_decay};
  for (std::size_t i = 0; i < params.size(); ++i) {
    adamw_state state;
    adamw_step(params[i], grads[i], state, o);
  }
  save_options so;
  so.dtype = dtype_from_name(source.dtype);
  so.copy_files_from = hf_dir;
  save_hf_model(*model, out_dir, so);
  return r;
}

nlohmann::json describe(const std::string& hf_dir) {
  const model_config cfg = read_config(hf_dir);
  decoder shapes(cfg, torch::TensorOptions().device(torch::kMeta), false);
  const std::int64_t n = shapes->parameter_count();
  const auto bytes = [n](std::int64_t per) { return n * per; };
  return {
      {"family", family_name(cfg.fam)},
      {"architecture", architecture_name(cfg.fam)},
      {"parameters", n},
      {"layers", cfg.num_layers},
      {"hidden_size", cfg.hidden_size},
      {"vocab_size", cfg.vocab_size},
      {"tie_word_embeddings", cfg.tie_word_embeddings},
      {"dtype", cfg.dtype},
      {"bytes",
       {{"fp32",
         {{"weights", bytes(4)}, {"gradients", bytes(4)}, {"optimizer_state", bytes(8)},
          {"total", bytes(16)}}},
        {"bf16_fp32_master",
         {{"weights", bytes(2)}, {"master_weights", bytes(4)}, {"gradients", bytes(2)},
          {"optimizer_state", bytes(8)}, {"total", bytes(16)}}}}},
  };
}

}  // namespace cohort::core::model

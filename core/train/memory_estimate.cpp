// Per-rank memory of a training job (see memory_estimate.hpp).
#include "core/train/memory_estimate.hpp"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/model/decoder.hpp"
#include "core/model/model_config.hpp"

namespace cohort::core::train {

model_shape read_model_shape(const config::model_spec& m) {
  model::model_config cfg;
  if (!m.hf_dir.empty())
    cfg = model::read_config(m.hf_dir);
  else if (!m.config_file.empty())
    cfg = model::read_config(m.config_file);
  else
    cfg = model::parse_config(nlohmann::json::parse(m.inline_config_json), "model.config");
  // Shapes only: on the meta device nothing is allocated.
  model::decoder shapes(cfg, torch::TensorOptions().device(torch::kMeta), false);
  return model_shape{shapes->parameter_count(), cfg.hidden_size, cfg.num_layers, cfg.num_heads,
                     cfg.vocab_size};
}

memory_estimate estimate_memory(const config::job_spec& spec, const model_shape& m) {
  const double n = static_cast<double>(m.parameters);
  const double w = spec.scaling.num_workers;
  const int stage = spec.zero.stage;
  const bool bf16 = spec.train.dtype == config::precision::bf16;
  const double p = bf16 ? 2 : 4;  // bytes per compute weight / gradient
  memory_estimate e;
  e.model = m;
  auto& r = e.per_rank;
  r.weights = stage >= 3 ? p * n / w : p * n;
  r.gradients = stage >= 2 ? 4 * n / w : p * n;
  // fp32 masters: an extra copy for bf16; for fp32 the compute copy is the master at stage 0,
  // and the engine keeps its updated shard apart from stage 1 on.
  r.master = stage == 0 ? (bf16 ? 4 * n : 0) : 4 * n / w;
  r.optimizer = (stage >= 1 ? 8 * n / w : 8 * n);
  // Activations of one micro-batch (Korthikanti et al.): s·b·h·(34 + 5·a·s/h) bytes per layer at
  // 2-byte precision; with per-layer checkpointing (or stage 3, which recomputes) only each
  // layer's input, s·b·h·2, plus one layer's worth. Logits add b·s·vocab·4.
  const double s = spec.train.seq_len, b = spec.train.micro_batch_size, h = m.hidden_size;
  const double a = m.num_heads, layers = m.num_layers;
  const double per_layer = s * b * h * (34 + 5 * a * s / std::max(h, 1.0)) * (p / 2);
  const bool recompute = spec.train.activation_checkpointing || stage >= 3;
  r.activations = (recompute ? layers * s * b * h * p + per_layer : layers * per_layer) +
                  b * s * m.vocab_size * 4;
  const bool offload = spec.zero.offload_optimizer == config::offload_device::cpu;
  const double on_device_optimizer = offload ? 0 : r.master + r.optimizer;
  const double on_host_optimizer = offload ? r.master + r.optimizer : 0;
  const double compute = r.weights + r.gradients + r.activations;
  if (spec.scaling.use_gpu) {
    r.device_bytes = compute + on_device_optimizer;
    r.host_bytes = on_host_optimizer;
  } else {
    r.host_bytes = compute + on_device_optimizer + on_host_optimizer;
  }
  e.rank0_consolidation_bytes = 4 * n;
  return e;
}

}  // namespace cohort::core::train

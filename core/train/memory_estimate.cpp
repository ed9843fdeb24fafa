// Per-rank memory of a training job (see memory_estimate.hpp).
#include "core/train/memory_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/model/hf_files.hpp"
#include "core/model/lora_config.hpp"
#include "core/train/shard_keep_order.hpp"

namespace cohort::core::train {

model_shape shape_of(const model::model_config& c) {
  const std::int64_t d = c.hidden_size, ffn = c.intermediate_size;
  const bool project = c.word_embed_proj_dim > 0 && c.word_embed_proj_dim != d;
  const std::int64_t embed_dim = project ? c.word_embed_proj_dim : d;
  const std::int64_t norm = c.norm_affine ? (c.norm == model::norm_kind::layer_norm ? 2 * d : d) : 0;
  std::int64_t largest = 0;
  const auto tensor = [&](std::int64_t elements) {
    largest = std::max(largest, elements);
    return elements;
  };
  // Unit 0, as decoder_impl registers it.
  std::int64_t outer = tensor(c.vocab_size * embed_dim);
  if (c.learned_positions) outer += tensor((c.max_positions + c.position_offset) * d);
  if (project) outer += tensor(embed_dim * d) + tensor(d * embed_dim);
  if (c.final_norm) outer += norm;
  if (!c.tie_word_embeddings) outer += tensor(c.vocab_size * embed_dim);
  if (c.lm_head_bias) outer += c.vocab_size;
  // One layer: norms, attention (fused qkv for Conv1D families), MLP.
  const std::int64_t q_out = c.num_heads * c.head_dim, kv_out = c.num_kv_heads * c.head_dim;
  std::int64_t layer = norm + (c.parallel_residual ? 0 : norm);
  if (c.conv1d) {
    layer += tensor(d * (q_out + 2 * kv_out));
  } else {
    layer += tensor(d * q_out) + 2 * tensor(d * kv_out);
  }
  if (c.qkv_bias) layer += q_out + 2 * kv_out;
  layer += tensor(q_out * d) + (c.o_bias ? d : 0);
  const std::int64_t projections = c.gated_mlp ? 3 : 2;
  layer += projections * tensor(d * ffn);
  if (c.mlp_bias) layer += (projections - 1) * ffn + d;
  model_shape s;
  s.hidden_size = d;
  s.num_layers = c.num_layers;
  s.num_heads = c.num_heads;
  s.kv_hidden = kv_out;
  s.vocab_size = c.vocab_size;
  s.intermediate_size = ffn;
  s.gated_mlp = c.gated_mlp;
  s.fused_path = true;
  s.outer_parameters = outer;
  s.layer_parameters = layer;
  s.parameters = outer + c.num_layers * layer;
  s.largest_tensor = largest;
  return s;
}

model_shape shape_of(const model::t5_config& c) {
  const std::int64_t d = c.d_model, inner = c.num_heads * c.d_kv, ffn = c.d_ff;
  const std::int64_t attention = 4 * d * inner, mlp = (c.gated ? 3 : 2) * d * ffn;
  const std::int64_t encoder_block = attention + mlp + 2 * d, decoder_block = 2 * attention + mlp + 3 * d;
  const std::int64_t blocks = c.num_layers + c.num_decoder_layers;
  model_shape s;
  s.hidden_size = d;
  s.num_layers = blocks;
  s.num_heads = c.num_heads;
  s.vocab_size = c.vocab_size;
  s.intermediate_size = ffn;
  s.gated_mlp = c.gated;
  s.outer_parameters = c.vocab_size * d * (c.tie_word_embeddings ? 1 : 2) + 2 * d +
                       2 * c.relative_attention_num_buckets * c.num_heads;
  const std::int64_t in_blocks = c.num_layers * encoder_block + c.num_decoder_layers * decoder_block;
  s.layer_parameters = (in_blocks + blocks - 1) / blocks;
  s.parameters = s.outer_parameters + in_blocks;
  s.largest_tensor = std::max(c.vocab_size * d, std::max(d * inner, d * ffn));
  s.largest_layer_parameters = c.num_decoder_layers > 0 ? decoder_block : encoder_block;
  s.seq2seq = true;
  return s;
}

std::int64_t lora_layer_parameters(const model::model_config& c, std::int64_t r,
                                   const std::vector<std::string>& targets) {
  const std::int64_t d = c.hidden_size, ffn = c.intermediate_size;
  const std::int64_t q_out = c.num_heads * c.head_dim, kv_out = c.num_kv_heads * c.head_dim;
  // (in, out) of each linear map of a layer under its peft name, in lora_module_names' order.
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> maps;
  if (c.conv1d) {  // GPT-2: c_attn; c_proj is the attention's output and the MLP's down map
    maps = {{{d, q_out + 2 * kv_out}}, {{q_out, d}, {ffn, d}}, {{d, ffn}}};
  } else {
    maps = {{{d, q_out}}, {{d, kv_out}}, {{d, kv_out}}, {{q_out, d}}};
    if (c.gated_mlp) maps.push_back({{d, ffn}});
    maps.push_back({{d, ffn}});
    maps.push_back({{ffn, d}});
  }
  const auto names = model::lora_module_names(c.fam);
  std::int64_t n = 0;
  for (std::size_t i = 0; i < names.size() && i < maps.size(); ++i) {
    if (std::find(targets.begin(), targets.end(), names[i]) == targets.end()) continue;
    for (const auto& [in, out] : maps[i]) n += r * (in + out);
  }
  return n;
}

std::int64_t lora_room_elements(const model::model_config& c, std::int64_t r,
                                const std::vector<std::string>& targets) {
  if (c.conv1d) return 0;
  const auto names = model::lora_module_names(c.fam);  // q, k, v, o, [gate,] up, down
  const auto adapted = [&](std::size_t i) {
    return std::find(targets.begin(), targets.end(), names[i]) != targets.end();
  };
  const std::int64_t d = c.hidden_size, ffn = c.intermediate_size;
  const std::int64_t q_out = c.num_heads * c.head_dim, kv_out = c.num_kv_heads * c.head_dim;
  const auto room = [&](std::int64_t rows, std::int64_t ranks) {
    return rows * (model::lora_room_row_stride(d, ranks) - d);
  };
  std::int64_t n = 0;
  if (adapted(0) && adapted(1) && adapted(2)) n += room(q_out + 2 * kv_out, 3 * r);
  if (c.gated_mlp && adapted(4) && adapted(5)) n += room(2 * ffn, 2 * r);
  return n;
}

model_shape read_model_shape(const config::model_spec& m, const std::string& s3_endpoint) {
  try {
    if (!m.hf_dir.empty()) {
      std::string file;
      const auto json = model::read_hf_config_json(m.hf_dir, s3_endpoint, &file);
      if (model::is_t5(json)) return shape_of(model::parse_t5_config(json, file));
      const auto config = model::parse_config(json, file);
      auto s = shape_of(config);
      if (m.lora.enabled) {
        s.lora_layer_parameters = lora_layer_parameters(config, m.lora.r, m.lora.target_modules);
        s.lora_room_layer_elements = lora_room_elements(config, m.lora.r, m.lora.target_modules);
      }
      return s;
    }
    if (!m.config_file.empty()) return shape_of(model::read_config(m.config_file));
    return shape_of(model::parse_config(nlohmann::json::parse(m.inline_config_json), "model.config"));
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("model: cannot read the model's shape: ") + e.what());
  }
}

namespace {

double bytes_of(config::precision p) { return p == config::precision::bf16 ? 2 : 4; }

double ceil_div(std::int64_t a, std::int64_t b) {
  return static_cast<double>((a + b - 1) / b);
}

std::string setting_of(const config::job_spec& spec) {
  std::string s = "ZeRO-" + std::to_string(spec.zero.stage) + ", " +
                  config::to_string(spec.train.dtype);
  const auto& lora = spec.model.lora;
  if (lora.enabled)
    s += ", LoRA r " + std::to_string(lora.r) + " on a frozen " +
         config::to_string(lora.base_dtype.value_or(spec.train.dtype)) + " base";
  const bool opt = spec.zero.offload_optimizer == config::offload_device::cpu;
  const bool param = spec.zero.offload_param == config::offload_device::cpu;
  if (opt && param && spec.zero.delayed_param_update)
    return s + ", offload_optimizer and offload_param cpu, delayed parameter update";
  if (opt && param) return s + ", offload_optimizer and offload_param cpu";
  if (opt) return s + ", offload_optimizer cpu";
  if (param) return s + ", offload_param cpu";
  return s + ", no offload";
}

// The first units in order whose sizes (`unit_bytes`, in unit order) add up to at most `room`:
// how many, and their bytes.
struct units_within {
  std::int64_t count = 0;
  double bytes = 0;
};
units_within first_units_within(const std::vector<double>& unit_bytes, double room) {
  units_within fit;
  for (const double bytes : unit_bytes) {
    if (fit.bytes + bytes > room) break;
    fit.bytes += bytes;
    ++fit.count;
  }
  return fit;
}

}  // namespace

memory_estimate estimate_memory(const config::job_spec& spec, const model_shape& m, double gpu_bytes) {
  const int stage = spec.zero.stage;
  const std::int64_t w = stage == 0 ? 1 : std::max(1, spec.scaling.num_workers);
  const double p = bytes_of(spec.train.dtype);
  const bool gpu = spec.scaling.use_gpu;
  const bool offload_param = stage == 3 && spec.zero.offload_param == config::offload_device::cpu;
  const bool offload_opt = offload_param || spec.zero.offload_optimizer == config::offload_device::cpu;
  // Layers are recomputed only with activation checkpointing; ZeRO-3 without it keeps every
  // layer's activations (only the gathered weights are freed between forward and backward).
  const bool recompute = spec.train.activation_checkpointing;
  const bool layers_reduced_in_backward = stage == 3 || (stage == 2 && recompute);
  const bool gathered_per_layer = stage == 3;
  // What trains: the whole model, or with LoRA only the adapters (none outside the layers) and,
  // when the vocabulary may grow (model.added_tokens, pad_vocab_to_multiple_of), the weights
  // outside the layers (the embedding and head train whole then; the plan takes the config's
  // vocabulary, a few rows short of a grown one).
  const bool lora = spec.model.lora.enabled;
  const bool vocab_trains = !spec.model.added_tokens.empty() || spec.model.pad_vocab_to_multiple_of > 1;
  const std::int64_t outer = lora && !vocab_trains ? 0 : m.outer_parameters;
  const std::int64_t per_layer = lora ? m.lora_layer_parameters : m.layer_parameters;
  const double n = static_cast<double>(outer + m.num_layers * per_layer);
  const double u0 = static_cast<double>(outer);
  const std::int64_t largest_layer = lora ? per_layer : std::max(per_layer, m.largest_layer_parameters);
  const double um = static_cast<double>(largest_layer);
  const std::int64_t unit_max = std::max(outer, largest_layer);
  const double shard = ceil_div(outer, w) + static_cast<double>(m.num_layers) * ceil_div(per_layer, w);
  const double unit_shard = ceil_div(unit_max, w);

  memory_estimate e;
  e.model = m;
  e.setting = setting_of(spec);
  auto& r = e.per_rank;
  const auto add = [&](const std::string& name, double bytes, bool on_device) {
    if (bytes > 0) r.items.push_back({name, bytes, on_device && gpu});
  };
  if (lora) {
    const auto base = spec.model.lora.base_dtype.value_or(spec.train.dtype);
    // The room beside q/k/v's and gate/up's rows, where the base is held in the activations' dtype.
    const double room = base == spec.train.dtype ? static_cast<double>(m.num_layers) *
                                                       static_cast<double>(m.lora_room_layer_elements)
                                                 : 0.0;
    add("frozen base weights", bytes_of(base) * (static_cast<double>(m.parameters) + room), true);
  }
  add("fp32 master shard", 4 * shard, !offload_opt);
  add("AdamW moments", 8 * shard, !offload_opt);
  add("fp32 gradient shard", 4 * shard, !offload_param);
  add(stage == 3 ? "gathered compute weights" : "compute weights",
      gathered_per_layer ? p * (u0 + 2 * um) : p * n, true);
  if (offload_param) add("pinned compute-dtype shard", p * shard, false);
  if (offload_param && spec.zero.delayed_param_update)  // the pair the update in flight uses
    add("delayed update's gradient and compute-dtype shards", (4 + p) * shard, false);
  add("compute-dtype gradients", layers_reduced_in_backward ? p * (u0 + um) : p * n, true);
  add("reduction buffer", 4 * static_cast<double>(unit_max) + (stage >= 2 ? 4 * unit_shard : 0),
      true);
  if (offload_opt) add("gradient shard staging", 4 * unit_shard, false);
  // A save streams the shard from where it lies through one buffer; an asynchronous one copies it
  // whole into host memory when it fits run.checkpoint.staging_bytes.
  const auto& ckpt = spec.run.checkpoint;
  const bool staged = ckpt.async && 12 * shard <= static_cast<double>(ckpt.staging_bytes);
  add(staged ? "checkpoint host copy (run.checkpoint.async)" : "checkpoint write buffer",
      staged ? 12 * shard : std::min(12 * shard, checkpoint_chunk_bytes), false);
  // Host memory on the node (tmpfs), counted against the rank that keeps it. Between the saves
  // (replicate_every) a step's replica is written beside the newest complete one, dropped after.
  if (ckpt.replicate && ckpt.replicate_every == 0)
    add("peer replicas: own shard and a buddy's copy (run.checkpoint.replicate)", 24 * shard, false);
  if (ckpt.replicate && ckpt.replicate_every > 0)
    add("peer replicas: own shard and a buddy's copy of two steps, the newest complete one and the one "
        "being written (run.checkpoint.replicate_every)",
        48 * shard, false);
  add(gpu ? "libraries, CUDA and NCCL host state, loader" : "libraries and loader",
      gpu ? gpu_process_host_bytes : cpu_process_host_bytes, false);

  const double t = static_cast<double>(spec.train.micro_batch_size) * spec.train.seq_len;
  const double d = static_cast<double>(m.hidden_size), L = static_cast<double>(m.num_layers);
  const double V = static_cast<double>(m.vocab_size), ffn = static_cast<double>(m.intermediate_size);
  const bool fused = gpu && m.fused_path && spec.train.path != config::compute_path::plain;
  const double kv = static_cast<double>(m.kv_hidden > 0 ? m.kv_hidden : m.hidden_size);
  const double layer_working = fused ? t * (p * (7 * d + 2 * kv + (m.gated_mlp ? 3 : 2) * ffn) + 8)
                                     : t * (p * (9 * d + (m.gated_mlp ? 4 : 2) * ffn) + 16 * d);
  // Attention's T² terms, in elements B·H·T² a layer: none where it is fused (GPUs); the CPU's
  // explicit path saves its scores and fp32 probabilities. train.deterministic on GPUs takes
  // torch's math path, which computes in fp32 and saves the probabilities (4 bytes each), and
  // holds 16 bytes an element more at its peak (fitted to the one peak measured: the 1.1B at
  // 8 × 2048 on an H200, 132.4 GiB at its first step).
  const double bht2 = static_cast<double>(spec.train.micro_batch_size) * m.num_heads * spec.train.seq_len *
                      spec.train.seq_len;
  const bool math_attention = gpu && spec.train.deterministic;
  const double scores = !gpu ? bht2 * (4 + p) : math_attention ? 4 * bht2 : 0;
  const double attention_peak = math_attention ? 16 * bht2 : 0;
  const double chunk = spec.train.loss_chunk_tokens > 0
                           ? std::min(t, static_cast<double>(spec.train.loss_chunk_tokens))
                           : t;
  const double padded_v = std::ceil(V / 64) * 64;  // the fused path's LM head pads the vocabulary
  const double logits = fused ? 2 * chunk * padded_v * p + 4 * padded_v * d : t * V * (p + 4 + 4);
  // Recomputing, the layer inputs stay for the whole backward; the head's logits and one layer's
  // recomputation are never alive at once. Otherwise every layer's working set is saved until the
  // loss has been computed from the logits.
  r.activation_bytes =
      recompute
          ? (L + 1) * p * d * t + std::max(2 * p * d * t + layer_working + scores + attention_peak, logits)
          : L * (layer_working + scores) + p * d * t + std::max(logits, attention_peak);
  add("activations", r.activation_bytes, true);
  // The gradient shard is made by a step's reductions and freed by its update: after the backward
  // (stages 0-2), or layer by layer as the backward frees each layer's activations (stage 3, stage
  // 2 recomputing). It and the activations are never alive whole at once; the peak holds the
  // larger of the two.
  if (!offload_param) {
    const double overlap = std::min(4 * shard, r.activation_bytes);
    if (overlap > 0) r.items.push_back({"gradient shard and activations not alive at once", -overlap, gpu});
  }
  if (gpu) add("CUDA context and allocator", cuda_context_bytes, true);

  for (const auto& item : r.items) (item.on_device ? r.device_bytes : r.steady_host_bytes) += item.bytes;
  const double cap = gpu_memory_limit_bytes(spec.runtime_env.env_vars);
  if (gpu && offload_param && spec.train.grad_accum > 1) {
    e.grads_summed_on_device = cap > 0 && r.device_bytes + 4 * shard <= cap;
    if (e.grads_summed_on_device) {
      add("fp32 gradient shard summed over the micro-batches", 4 * shard, true);
      r.device_bytes += 4 * shard;
    }
  }
  if (offload_param && spec.train.grad_accum > 1 && !e.grads_summed_on_device) {
    // The later micro-batches' shards come to the host through two staging buffers in turn.
    add("second gradient shard staging buffer (micro-batches summed on the host)", 4 * unit_shard, false);
    r.steady_host_bytes += 4 * unit_shard;
  }
  if (gpu && offload_param && cap > 0) {
    // What room is left under the cap, less its margin, keeps compute-dtype shards between
    // updates, the units in shard_keep_position's order.
    const auto units = static_cast<std::size_t>(m.num_layers) + 1;
    std::vector<double> unit_shards(units);
    for (std::size_t u = 0; u < units; ++u)
      unit_shards[shard_keep_position(u, units)] = p * ceil_div(u == 0 ? outer : per_layer, w);
    const auto kept = first_units_within(unit_shards, (1 - kept_shards_cap_margin) * cap - r.device_bytes);
    e.param_shard_units_kept_on_device = kept.count;
    add("compute-dtype parameter shards of " + std::to_string(kept.count) + " of " +
            std::to_string(unit_shards.size()) + " units kept between updates",
        kept.bytes, true);
    r.device_bytes += kept.bytes;
  }
  if (gathered_per_layer && !m.seq2seq) {
    const double layer_bytes = p * um;
    const double usable = gpu ? usable_gpu_bytes(cap, gpu_bytes) : 0;
    std::int64_t kept = spec.zero.layers_kept_gathered;
    if (kept == 0) {
      kept = 1;
      if (usable > 0 && !offload_param && layer_bytes > 0) {
        const double room = usable / kept_layers_reserve_factor - r.device_bytes;
        if (room > 0) kept += static_cast<std::int64_t>(std::floor(room / layer_bytes));
      }
    }
    e.layers_kept_gathered = std::min<std::int64_t>(kept, m.num_layers);
    const double more =
        layer_bytes * static_cast<double>(std::max<std::int64_t>(0, e.layers_kept_gathered - 1));
    add("gathered weights of " + std::to_string(e.layers_kept_gathered - 1) +
            " more layers kept from forward to backward (zero.layers_kept_gathered)",
        more, true);
    (gpu ? r.device_bytes : r.steady_host_bytes) += more;
  }
  // Loading, a rank reads its fp32 shard a unit at a time: it stays in host memory on a CPU and
  // with offload (beside one parameter tensor as read), and goes to the GPU unit by unit otherwise.
  const double process = gpu ? gpu_process_host_bytes : cpu_process_host_bytes;
  r.load_peak_host_bytes =
      (!gpu || offload_opt) ? 4 * (stage == 0 ? n : shard) + 4 * static_cast<double>(m.largest_tensor) + process
                            : 4 * (stage == 0 ? static_cast<double>(unit_max) : unit_shard) + process;
  r.host_bytes = std::max(r.steady_host_bytes, r.load_peak_host_bytes);
  // The merged LoRA export holds every adapter and one base tensor as read and in fp32.
  e.rank0_extra_host_bytes = lora ? 4 * n + 8 * static_cast<double>(m.largest_tensor)
                                  : 4 * static_cast<double>(m.largest_tensor);
  return e;
}

double gpu_memory_limit_bytes(const std::map<std::string, std::string>& env_vars) {
  const auto it = env_vars.find(config::gpu_memory_limit_variable);
  if (it == env_vars.end()) return 0;
  const double limit = config::gpu_memory_limit_gib(it->second);
  if (limit <= 0)
    throw std::invalid_argument(std::string("runtime_env.env_vars.") + config::gpu_memory_limit_variable +
                                ": got \"" + it->second + "\"; expected a number of GiB > 0, e.g. \"24\"");
  return limit * gib;
}

double usable_gpu_bytes(double limit_bytes, double node_gpu_bytes) {
  if (limit_bytes <= 0) return node_gpu_bytes;
  if (node_gpu_bytes <= 0) return limit_bytes;
  return std::min(limit_bytes, node_gpu_bytes);
}

std::string format_memory(double bytes) {
  char buffer[32];
  if (std::abs(bytes) < gib)
    std::snprintf(buffer, sizeof buffer, "%.1f MiB", bytes / (1024.0 * 1024.0));
  else
    std::snprintf(buffer, sizeof buffer, "%.1f GiB", bytes / gib);
  return buffer;
}

}  // namespace cohort::core::train

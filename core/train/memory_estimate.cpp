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

// What the plan derives from the job and the model's shape before it counts anything.
struct plan_terms {
  int stage = 0;
  std::int64_t w = 1;  // the ranks a shard is 1/w of (1 at stage 0)
  double p = 4;        // bytes of the compute dtype
  bool gpu = false, offload_param = false, offload_opt = false;
  // Layers are recomputed only with activation checkpointing; ZeRO-3 without it keeps every
  // layer's activations (only the gathered weights are freed between forward and backward).
  bool recompute = false, layers_reduced_in_backward = false, gathered_per_layer = false;
  bool lora = false;
  std::int64_t outer = 0, per_layer = 0, unit_max = 0;  // trained parameters outside the layers, a layer's
  double n = 0, u0 = 0, um = 0;                         // all trained; outer; the largest layer's
  double shard = 0, unit_shard = 0;                     // a rank's shard of them all; of the largest unit
};

plan_terms plan_terms_of(const config::job_spec& spec, const model_shape& m) {
  plan_terms t;
  t.stage = spec.zero.stage;
  t.w = t.stage == 0 ? 1 : std::max(1, spec.scaling.num_workers);
  t.p = bytes_of(spec.train.dtype);
  t.gpu = spec.scaling.use_gpu;
  t.offload_param = t.stage == 3 && spec.zero.offload_param == config::offload_device::cpu;
  t.offload_opt = t.offload_param || spec.zero.offload_optimizer == config::offload_device::cpu;
  t.recompute = spec.train.activation_checkpointing;
  t.layers_reduced_in_backward = t.stage == 3 || (t.stage == 2 && t.recompute);
  t.gathered_per_layer = t.stage == 3;
  // What trains: the whole model, or with LoRA only the adapters (none outside the layers) and,
  // when the vocabulary may grow (model.added_tokens, pad_vocab_to_multiple_of), the weights
  // outside the layers (the embedding and head train whole then; the plan takes the config's
  // vocabulary, a few rows short of a grown one).
  t.lora = spec.model.lora.enabled;
  const bool vocab_trains = !spec.model.added_tokens.empty() || spec.model.pad_vocab_to_multiple_of > 1;
  t.outer = t.lora && !vocab_trains ? 0 : m.outer_parameters;
  t.per_layer = t.lora ? m.lora_layer_parameters : m.layer_parameters;
  t.n = static_cast<double>(t.outer + m.num_layers * t.per_layer);
  t.u0 = static_cast<double>(t.outer);
  const std::int64_t largest_layer = t.lora ? t.per_layer : std::max(t.per_layer, m.largest_layer_parameters);
  t.um = static_cast<double>(largest_layer);
  t.unit_max = std::max(t.outer, largest_layer);
  t.shard = ceil_div(t.outer, t.w) + static_cast<double>(m.num_layers) * ceil_div(t.per_layer, t.w);
  t.unit_shard = ceil_div(t.unit_max, t.w);
  return t;
}

// An item of the rank's memory, on the device only in a GPU job; nothing for no bytes.
void add_item(rank_memory& r, const plan_terms& t, const std::string& name, double bytes, bool on_device) {
  if (bytes > 0) r.items.push_back({name, bytes, on_device && t.gpu});
}

// The model's state: a LoRA job's frozen base, the optimizer's, the weights and gradients in
// the compute dtype, the reduction and staging buffers.
void add_state_items(rank_memory& r, const config::job_spec& spec, const model_shape& m,
                     const plan_terms& t) {
  if (t.lora) {
    const auto base = spec.model.lora.base_dtype.value_or(spec.train.dtype);
    // The room beside q/k/v's and gate/up's rows, where the base is held in the activations' dtype.
    const double room = base == spec.train.dtype ? static_cast<double>(m.num_layers) *
                                                       static_cast<double>(m.lora_room_layer_elements)
                                                 : 0.0;
    add_item(r, t, "frozen base weights", bytes_of(base) * (static_cast<double>(m.parameters) + room), true);
  }
  add_item(r, t, "fp32 master shard", 4 * t.shard, !t.offload_opt);
  add_item(r, t, "AdamW moments", 8 * t.shard, !t.offload_opt);
  add_item(r, t, "fp32 gradient shard", 4 * t.shard, !t.offload_param);
  add_item(r, t, t.stage == 3 ? "gathered compute weights" : "compute weights",
           t.gathered_per_layer ? t.p * (t.u0 + 2 * t.um) : t.p * t.n, true);
  if (t.offload_param) add_item(r, t, "pinned compute-dtype shard", t.p * t.shard, false);
  if (t.offload_param && spec.zero.delayed_param_update)  // the pair the update in flight uses
    add_item(r, t, "delayed update's gradient and compute-dtype shards", (4 + t.p) * t.shard, false);
  add_item(r, t, "compute-dtype gradients", t.layers_reduced_in_backward ? t.p * (t.u0 + t.um) : t.p * t.n,
           true);
  add_item(r, t, "reduction buffer",
           4 * static_cast<double>(t.unit_max) + (t.stage >= 2 ? 4 * t.unit_shard : 0), true);
  if (t.offload_opt) add_item(r, t, "gradient shard staging", 4 * t.unit_shard, false);
}

// The host's besides the state: the checkpoint's buffer or copy, peer replicas, the process.
void add_host_items(rank_memory& r, const config::job_spec& spec, const plan_terms& t) {
  // A save streams the shard from where it lies through one buffer; an asynchronous one copies it
  // whole into host memory when it fits run.checkpoint.staging_bytes.
  const auto& ckpt = spec.run.checkpoint;
  const bool staged = ckpt.async && 12 * t.shard <= static_cast<double>(ckpt.staging_bytes);
  add_item(r, t, staged ? "checkpoint host copy (run.checkpoint.async)" : "checkpoint write buffer",
           staged ? 12 * t.shard : std::min(12 * t.shard, checkpoint_chunk_bytes), false);
  // Host memory on the node (tmpfs), counted against the rank that keeps it. Between the saves
  // (replicate_every) a step's replica is written beside the newest complete one, dropped after.
  if (ckpt.replicate && ckpt.replicate_every == 0)
    add_item(r, t, "peer replicas: own shard and a buddy's copy (run.checkpoint.replicate)", 24 * t.shard,
             false);
  if (ckpt.replicate && ckpt.replicate_every > 0)
    add_item(r, t,
             "peer replicas: own shard and a buddy's copy of two steps, the newest complete one and the one "
             "being written (run.checkpoint.replicate_every)",
             48 * t.shard, false);
  add_item(r, t, t.gpu ? "libraries, CUDA and NCCL host state, loader" : "libraries and loader",
           t.gpu ? gpu_process_host_bytes : cpu_process_host_bytes, false);
}

// One micro-batch's activations at their peak: the layers' working sets (saved, or recomputed one
// at a time), attention's T² terms where they are kept, and the head's logits.
double activation_bytes_of(const config::job_spec& spec, const model_shape& m, const plan_terms& pt) {
  const double p = pt.p;
  const double t = static_cast<double>(spec.train.micro_batch_size) * spec.train.seq_len;
  const double d = static_cast<double>(m.hidden_size), L = static_cast<double>(m.num_layers);
  const double V = static_cast<double>(m.vocab_size), ffn = static_cast<double>(m.intermediate_size);
  const bool fused = pt.gpu && m.fused_path && spec.train.path != config::compute_path::plain;
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
  const bool math_attention = pt.gpu && spec.train.deterministic;
  const double scores = !pt.gpu ? bht2 * (4 + p) : math_attention ? 4 * bht2 : 0;
  const double attention_peak = math_attention ? 16 * bht2 : 0;
  const double chunk = spec.train.loss_chunk_tokens > 0
                           ? std::min(t, static_cast<double>(spec.train.loss_chunk_tokens))
                           : t;
  const double padded_v = std::ceil(V / 64) * 64;  // the fused path's LM head pads the vocabulary
  const double logits = fused ? 2 * chunk * padded_v * p + 4 * padded_v * d : t * V * (p + 4 + 4);
  // Recomputing, the layer inputs stay for the whole backward; the head's logits and one layer's
  // recomputation are never alive at once. Otherwise every layer's working set is saved until the
  // loss has been computed from the logits.
  return pt.recompute
             ? (L + 1) * p * d * t + std::max(2 * p * d * t + layer_working + scores + attention_peak, logits)
             : L * (layer_working + scores) + p * d * t + std::max(logits, attention_peak);
}

// With parameter offload, what depends on the GPU cap (after the items above are summed): the
// micro-batches' gradient sum on the device or a second host staging buffer, and the
// compute-dtype shards kept on the device between updates in the room left.
void add_offload_items_under_cap(memory_estimate& e, const config::job_spec& spec, const model_shape& m,
                                 const plan_terms& t, double cap) {
  auto& r = e.per_rank;
  if (t.gpu && t.offload_param && spec.train.grad_accum > 1) {
    e.grads_summed_on_device = cap > 0 && r.device_bytes + 4 * t.shard <= cap;
    if (e.grads_summed_on_device) {
      add_item(r, t, "fp32 gradient shard summed over the micro-batches", 4 * t.shard, true);
      r.device_bytes += 4 * t.shard;
    }
  }
  if (t.offload_param && spec.train.grad_accum > 1 && !e.grads_summed_on_device) {
    // The later micro-batches' shards come to the host through two staging buffers in turn.
    add_item(r, t, "second gradient shard staging buffer (micro-batches summed on the host)",
             4 * t.unit_shard, false);
    r.steady_host_bytes += 4 * t.unit_shard;
  }
  if (t.gpu && t.offload_param && cap > 0) {
    // What room is left under the cap, less its margin, keeps compute-dtype shards between
    // updates, the units in shard_keep_position's order.
    const auto units = static_cast<std::size_t>(m.num_layers) + 1;
    std::vector<double> unit_shards(units);
    for (std::size_t u = 0; u < units; ++u)
      unit_shards[shard_keep_position(u, units)] = t.p * ceil_div(u == 0 ? t.outer : t.per_layer, t.w);
    const auto kept = first_units_within(unit_shards, (1 - kept_shards_cap_margin) * cap - r.device_bytes);
    e.param_shard_units_kept_on_device = kept.count;
    add_item(r, t,
             "compute-dtype parameter shards of " + std::to_string(kept.count) + " of " +
                 std::to_string(unit_shards.size()) + " units kept between updates",
             kept.bytes, true);
    r.device_bytes += kept.bytes;
  }
}

// ZeRO-3 of a decoder: the layers kept gathered from forward to backward (the job's choice, or as
// many as the usable GPU memory has room for beyond the rest) and their bytes beyond the one the
// gathered weights count.
void add_layers_kept_gathered(memory_estimate& e, const config::job_spec& spec, const model_shape& m,
                              const plan_terms& t, double cap, double gpu_bytes) {
  if (!t.gathered_per_layer || m.seq2seq) return;
  auto& r = e.per_rank;
  const double layer_bytes = t.p * t.um;
  const double usable = t.gpu ? usable_gpu_bytes(cap, gpu_bytes) : 0;
  std::int64_t kept = spec.zero.layers_kept_gathered;
  if (kept == 0) {
    kept = 1;
    if (usable > 0 && !t.offload_param && layer_bytes > 0) {
      const double room = usable / kept_layers_reserve_factor - r.device_bytes;
      if (room > 0) kept += static_cast<std::int64_t>(std::floor(room / layer_bytes));
    }
  }
  e.layers_kept_gathered = std::min<std::int64_t>(kept, m.num_layers);
  const double more =
      layer_bytes * static_cast<double>(std::max<std::int64_t>(0, e.layers_kept_gathered - 1));
  add_item(r, t,
           "gathered weights of " + std::to_string(e.layers_kept_gathered - 1) +
               " more layers kept from forward to backward (zero.layers_kept_gathered)",
           more, true);
  (t.gpu ? r.device_bytes : r.steady_host_bytes) += more;
}

// Host memory while loading and rank 0's export: loading, a rank reads its fp32 shard a unit at a
// time: it stays in host memory on a CPU and with offload (beside one parameter tensor as read),
// and goes to the GPU unit by unit otherwise. The merged LoRA export holds every adapter and one
// base tensor as read and in fp32.
void set_host_peaks(memory_estimate& e, const model_shape& m, const plan_terms& t) {
  auto& r = e.per_rank;
  const double process = t.gpu ? gpu_process_host_bytes : cpu_process_host_bytes;
  r.load_peak_host_bytes =
      (!t.gpu || t.offload_opt)
          ? 4 * (t.stage == 0 ? t.n : t.shard) + 4 * static_cast<double>(m.largest_tensor) + process
          : 4 * (t.stage == 0 ? static_cast<double>(t.unit_max) : t.unit_shard) + process;
  r.host_bytes = std::max(r.steady_host_bytes, r.load_peak_host_bytes);
  e.rank0_extra_host_bytes = t.lora ? 4 * t.n + 8 * static_cast<double>(m.largest_tensor)
                                    : 4 * static_cast<double>(m.largest_tensor);
}

}  // namespace

memory_estimate estimate_memory(const config::job_spec& spec, const model_shape& m, double gpu_bytes) {
  const plan_terms t = plan_terms_of(spec, m);
  memory_estimate e;
  e.model = m;
  e.setting = setting_of(spec);
  auto& r = e.per_rank;
  add_state_items(r, spec, m, t);
  add_host_items(r, spec, t);
  r.activation_bytes = activation_bytes_of(spec, m, t);
  add_item(r, t, "activations", r.activation_bytes, true);
  // The gradient shard is made by a step's reductions and freed by its update: after the backward
  // (stages 0-2), or layer by layer as the backward frees each layer's activations (stage 3, stage
  // 2 recomputing). It and the activations are never alive whole at once; the peak holds the
  // larger of the two.
  if (!t.offload_param) {
    const double overlap = std::min(4 * t.shard, r.activation_bytes);
    if (overlap > 0) r.items.push_back({"gradient shard and activations not alive at once", -overlap, t.gpu});
  }
  if (t.gpu) add_item(r, t, "CUDA context and allocator", cuda_context_bytes, true);

  for (const auto& item : r.items) (item.on_device ? r.device_bytes : r.steady_host_bytes) += item.bytes;
  const double cap = gpu_memory_limit_bytes(spec.runtime_env.env_vars);
  add_offload_items_under_cap(e, spec, m, t, cap);
  add_layers_kept_gathered(e, spec, m, t, cap, gpu_bytes);
  set_host_peaks(e, m, t);
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

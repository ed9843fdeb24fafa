// causal_lm_engine: model and data set-up, the step (micro-batches, forward/backward, ZeRO
// reduction, clipping, AdamW) and the weights' gathering.
#include "core/train/causal_lm_engine.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/ckpt/hf_export.hpp"
#include "core/ckpt/reader.hpp"
#include "core/ckpt/reshard.hpp"
#include "core/data/batch_loader.hpp"
#include "core/model/adamw.hpp"
#include "core/model/decoder.hpp"
#include "core/model/gemm.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/lora_config.hpp"
#include "core/model/model_config.hpp"
#include "core/model/model_error.hpp"
#include "core/model/vocab_resize.hpp"
#include "core/model/weight_source.hpp"
#include "core/train/device_memory.hpp"
#include "core/train/engine_checkpoint.hpp"
#include "core/train/engine_common.hpp"
#include "core/train/job_preflight.hpp"
#include "core/train/lr_schedule.hpp"
#include "core/train/memory_estimate.hpp"
#include "core/train/mfu.hpp"
#include "core/train/run_control.hpp"
#include "core/train/step_graph.hpp"
#include "core/train/test_hooks.hpp"
#include "core/train/vocab_plan.hpp"
#include "core/train/zero_optimizer.hpp"

namespace cohort::core::train {

namespace {

// The model's config as the spec names it (a Hugging Face directory, whose files `files` holds; a
// config file or inline).
model::model_config model_config_of(const config::model_spec& m, const model::hf_files& files) {
  if (!m.hf_dir.empty()) {
    auto cfg = model::read_config(files.dir);
    cfg.dtype = "float32";  // the masters' dtype, which checkpoints record
    return cfg;
  }
  if (!m.config_file.empty()) return model::read_config(m.config_file);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(m.inline_config_json);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("model.config: not a JSON object: ") + e.what());
  }
  return model::parse_config(j, "model.config");
}

// Where the initial weights come from: the Hugging Face directory's safetensors (whose model has
// `stored_vocab` ids: rows past them are new, vocab_resize.hpp), else init_seed.
std::unique_ptr<model::weight_source> initial_weights(const config::model_spec& m,
                                                      const model::hf_files& files, const model::decoder& net,
                                                      std::int64_t stored_vocab) {
  if (!m.hf_dir.empty()) return model::open_resized_hf_weights(files, net->hf_parameters(), stored_vocab);
  return model::seeded_init(net->config(), net->hf_parameters(), m.init_seed);
}

// A reward model's initial weights: the score head (score.weight) from `score`, every other weight
// from `base`.
class score_and_base final : public model::weight_source {
 public:
  score_and_base(std::unique_ptr<model::weight_source> score, std::unique_ptr<model::weight_source> base)
      : score_(std::move(score)), base_(std::move(base)) {}
  void read(const std::string& name, std::int64_t begin, torch::Tensor& out) const override {
    (name == score_name ? *score_ : *base_).read(name, begin, out);
  }
  static constexpr const char* score_name = "score.weight";

 private:
  std::unique_ptr<model::weight_source> score_, base_;
};

// A reward model's initial weights (model.hf_dir's, or init_seed's): a …ForSequenceClassification
// directory's score.weight when it has one, else the score head drawn as seeded_init draws a linear
// map (normal(0, initializer_range)) from train.seed, so every world size starts alike.
std::unique_ptr<model::weight_source> reward_initial_weights(const config::job_spec& spec,
                                                             const model::hf_files& files,
                                                             const model::decoder& net,
                                                             std::int64_t stored_vocab) {
  const auto& params = net->hf_parameters();
  const bool hf = !spec.model.hf_dir.empty();
  if (hf && model::hf_has_tensor(files, score_and_base::score_name))
    return model::open_resized_hf_weights(files, params, stored_vocab);
  std::vector<model::hf_parameter> base, score;
  for (const auto& p : params) (p.name == score_and_base::score_name ? score : base).push_back(p);
  auto rest = hf ? model::open_resized_hf_weights(files, base, stored_vocab)
                 : model::seeded_init(net->config(), base, spec.model.init_seed);
  return std::make_unique<score_and_base>(model::seeded_init(net->config(), score, spec.train.seed),
                                          std::move(rest));
}

// The initial values of a LoRA job's trained weights: a grown vocabulary's embedding and head
// from the base directory (`vocab`, null when the vocabulary did not grow), the adapters from
// lora_init.
class vocab_and_adapters final : public model::weight_source {
 public:
  vocab_and_adapters(const model::weight_source* vocab, std::unique_ptr<model::weight_source> adapters)
      : vocab_(vocab), adapters_(std::move(adapters)) {}
  void read(const std::string& name, std::int64_t begin, torch::Tensor& out) const override {
    (vocab_ && model::is_vocab_parameter(name) ? *vocab_ : *adapters_).read(name, begin, out);
  }

 private:
  const model::weight_source* vocab_;
  std::unique_ptr<model::weight_source> adapters_;
};

model::compute_path compute_path_of(config::compute_path p) {
  switch (p) {
    case config::compute_path::plain:
      return model::compute_path::plain;
    case config::compute_path::fused:
      return model::compute_path::fused;
    case config::compute_path::automatic:
      break;
  }
  return model::compute_path::automatic;
}

bool has_dropout(const model::model_config& c) {
  return c.embed_dropout > 0 || c.attention_dropout > 0 || c.residual_dropout > 0 ||
         c.activation_dropout > 0;
}

model::lora_config lora_config_of(const config::model_spec& m) {
  model::lora_config c;
  c.r = m.lora.r;
  c.alpha = m.lora.alpha;
  c.dropout = m.lora.dropout;
  c.target_modules = m.lora.target_modules;
  c.base = m.hf_dir;
  return c;
}

struct batch_tensors {
  torch::Tensor ids;     // (B, T) int64; a reward model's: B/2 chosen rows, then B/2 rejected
  torch::Tensor labels;  // (B, T) int64, -100 where not a label
  // The positions whose next token is a label (counted on the host); a reward model's pairs.
  double label_count = 0;
};

// The figures of summed {correct, chosen, rejected} over `pairs` pairs.
reward_metrics reward_metrics_of(const torch::Tensor& sums, double pairs) {
  const double n = std::max(1.0, pairs);
  reward_metrics m;
  m.accuracy = sums[0].item<double>() / n;
  m.chosen_mean = sums[1].item<double>() / n;
  m.rejected_mean = sums[2].item<double>() / n;
  return m;
}

}  // namespace

// A reward model's sums over pairs (correct, chosen scores, rejected scores), fp64 on the device
// until read.
struct reward_sums {
  torch::Tensor sums;  // (3) or undefined (none yet)
  void add(const torch::Tensor& chosen, const torch::Tensor& rejected) {
    const auto part = torch::stack({chosen.gt(rejected).sum().to(torch::kDouble),
                                    chosen.sum().to(torch::kDouble), rejected.sum().to(torch::kDouble)});
    sums = sums.defined() ? sums + part : part;
  }
  // {correct, chosen, rejected} on the host (zeros without a pair).
  std::vector<double> take() {
    std::vector<double> out(3, 0.0);
    if (sums.defined()) {
      const auto host = sums.cpu();
      for (int i = 0; i < 3; ++i) out[static_cast<std::size_t>(i)] = host[i].item<double>();
    }
    sums = torch::Tensor();
    return out;
  }
};

struct causal_lm_engine::impl : engine_state {
  model::decoder net{nullptr};
  bool recompute = false;     // train.activation_checkpointing
  // Stage 3 without checkpointing: every layer's graph is kept from its forward to its backward
  // while its gathered weights' storage is freed in between (zero_optimizer.hpp).
  bool kept_graphs = false;
  // Stages 2-3 on the layer-by-layer paths reduce-scatter each layer's gradients right after its
  // backward (so a rank never holds all of them); otherwise they are reduced once per step.
  bool layers_reduced_in_backward = false;
  // Stage 3: the last this many layers keep their gathered weights from their forward to their
  // backward (memory_estimate::layers_kept_gathered); the others are gathered again for it.
  std::size_t layers_kept_gathered = 1;
  bool last_micro_batch = true;  // the step's micro-batch being computed is its last
  bool save_rng = false;
  vocab_plan vocab;  // the model's vocabulary, grown for added tokens
  // Whether the token embedding (and the head with it) trains: always without LoRA; with LoRA
  // only when the vocabulary grew.
  bool embeddings_train = true;
  // workload reward_model: the decoder has a score head in place of its LM head (num_labels 1),
  // the data sets are pairs, and the loss is the pairwise one (see head_loss).
  bool reward = false;
  reward_sums reward_step;  // the current step's (or evaluation's) sums over this rank's pairs
  // A step's micro-batches as the loader gave them, on their way to the device.
  struct fetched_step {
    std::int64_t step = 0;  // the loader's step they are of
    std::vector<batch_tensors> batches;
    double labels = 0, tokens = 0;  // this rank's label positions and tokens
    std::vector<std::int64_t> samples;
  };
  // The next step's, read while this step's work runs on the device (the loader then stands one
  // step ahead of steps_done, which is what a checkpoint records as the sampler's position).
  std::optional<fetched_step> next_batches;
  // The attention context of each sequence length met (rotary tables, masks): computed once, and
  // kept, since a captured step graph reads them.
  std::map<std::int64_t, model::attention_context> contexts;
  // train.cuda_graph where it applies (see use_step_graph): the whole-model pass as CUDA graphs.
  std::unique_ptr<step_graph> graph;

  impl(const config::job_spec& s, comm::process_group& g, const std::atomic<bool>* c, bool data_verified)
      : engine_state(s, g, c), reward(s.workload == config::workload_kind::reward_model) {
    const auto& train = spec.train;
    if (spec.data.train.empty())
      throw std::invalid_argument(std::string("data.train: missing; ") + config::to_string(spec.workload) +
                                  " needs a directory written by `cohort-data build`");
    auto config = model_config_of(spec.model, model_files);
    seed_rank(train, group.rank());
    // Timed GEMM picks pay alone on a GPU, not beside ZeRO's collectives (model/gemm.hpp).
    model::gemm::set_timed_picks(group.size() == 1 && !test_gemm_through_aten());
    model::gemm::set_own_gemm(!test_no_own_gemm() && !test_gemm_through_aten());
    model::gemm::set_own_gemm_rotary(!test_no_own_rotary());
    open_data(data_verified);
    vocab = plan_vocab(spec, config.vocab_size, data->info(), eval_data ? &eval_data->info() : nullptr);
    config.vocab_size = vocab.vocab;
    if (reward) make_reward_config(config);
    build_model(config);
    const auto kind = reward ? data::batch_kind::pairs : data::batch_kind::decoder;
    loader = std::make_unique<data::batch_loader>(data, loader_options_of(train, group, kind));
    total_steps = train.max_steps > 0 ? train.max_steps : loader->steps_per_epoch() * train.epochs;
    make_optimizer();
    // The optimizer moved the weights (stage 3: only their shards); the rest follows.
    net->to(device);
    if (device.is_cuda()) peak_flops = peak_bf16_flops(cuda_device_name(device.index()));
    recompute = train.activation_checkpointing;
    kept_graphs = spec.zero.stage == 3 && !recompute;
    layers_reduced_in_backward = (recompute || kept_graphs) && spec.zero.stage >= 2;
    save_rng = recompute && dropout();
    make_step_graph();
  }

  void make_step_graph() {
    graph.reset();
    if (!use_step_graph()) return;
    graph = std::make_unique<step_graph>(
        [this](const torch::Tensor& ids, const torch::Tensor& labels, const torch::Tensor& scale) {
          return whole_pass({ids, labels, 0}, scale);
        },
        net->parameters());
  }

  bool dropout() const { return has_dropout(net->config()) || (net->has_lora() && net->lora().dropout > 0); }

  bool use_step_graph() const {
    return spec.train.cuda_graph && device.is_cuda() &&
           causal_lm_engine::step_graph_refusal(spec, dropout()).empty();
  }

  const model::attention_context& context_of(std::int64_t T) {
    auto at = contexts.find(T);
    if (at == contexts.end()) at = contexts.emplace(T, net->context(T, device)).first;
    return at->second;
  }

  // A reward model: one score (num_labels 1), read at each row's last token that is not the data
  // set's pad id, which config.json's pad_token_id then holds (transformers finds the token so).
  void make_reward_config(model::model_config& config) const {
    if (spec.model.lora.enabled)
      throw std::invalid_argument(
          "model.lora: workload reward_model trains the whole model and its score head; "
          "remove model.lora");
    if (config.num_labels > 1)
      throw std::invalid_argument(
          "model.hf_dir: a sequence classifier of num_labels " + std::to_string(config.num_labels) +
          "; a reward model has one score (num_labels 1), or starts from a causal LM");
    config.num_labels = 1;
    config.pad_token_id = data->info().pad_id;
  }

  // data.train (and data.eval), their files checked against their manifests unless the caller
  // did (`data_verified`).
  void open_data(bool data_verified) {
    data = open_train_data(spec, group.rank());
    if (spec.data.verify && !data_verified && !data->streamed()) {  // streamed: checked as fetched
      // Before any weight is loaded or step taken: a corrupt shard fails here, named, not at the
      // step that happens to read it. Every rank may read every shard (sampler.hpp), so every
      // rank checks them all, on threads of its own.
      verify_data_checksums(spec.data.train);
    }
    if (!spec.data.eval.empty()) open_eval_data(!data_verified);
  }

  // The decoder of `config` (its vocabulary planned) as placeholders, with LoRA adapters when the
  // spec has them. No rank holds the whole model: the weights are placeholders until the ZeRO
  // optimizer fills its shards from the source (and, below stage 3, gathers the whole weights on
  // the device).
  void build_model(const model::model_config& config) {
    net = model::make_placeholder_decoder(config);
    if (spec.model.lora.enabled) {
      if (spec.model.hf_dir.empty())
        throw std::invalid_argument("model.lora: needs model.hf_dir, the Hugging Face model the adapters adapt");
      try {
        net->add_lora(lora_config_of(spec.model), dtype_of(spec.train.dtype));
      } catch (const model::model_error& e) {
        throw std::invalid_argument(e.what());  // names model.lora.*
      }
    }
    net->set_compute_path(compute_path_of(spec.train.path));
    net->set_loss_chunk_tokens(spec.train.loss_chunk_tokens);
  }

  // The ZeRO optimizer over the weights that train, filled from their initial values.
  void make_optimizer() {
    zero_options zo = zero_options_of(spec, device);
    auto shape = shape_of(net->config());
    if (net->has_lora()) {
      const auto& lora = spec.model.lora;
      shape.lora_layer_parameters = lora_layer_parameters(net->config(), lora.r, lora.target_modules);
      shape.lora_room_layer_elements = lora_room_elements(net->config(), lora.r, lora.target_modules);
    }
    const auto plan = estimate_memory(spec, shape, device.is_cuda() ? gpu_total_bytes(device.index()) : 0);
    layers_kept_gathered = static_cast<std::size_t>(std::max<std::int64_t>(1, plan.layers_kept_gathered));
    zo.sum_grads_on_device = plan.grads_summed_on_device;
    zo.param_shard_units_kept_on_device =
        test_host_param_gathers() ? 0 : plan.param_shard_units_kept_on_device;
    const auto wait = [this](const std::shared_ptr<comm::work>& w) { wait_for(w, group, cancelled); };
    if (!net->has_lora()) {
      const auto initial = reward ? reward_initial_weights(spec, model_files, net, vocab.model_vocab)
                                  : initial_weights(spec.model, model_files, net, vocab.model_vocab);
      optimizer = std::make_unique<zero_optimizer>(net->hf_parameters(), *initial, group, zo, wait);
      return;
    }
    // LoRA: the adapters train, initialised from train.seed; the base is frozen and whole. A grown
    // vocabulary's new rows must learn, so then the embedding and LM head (and its bias) train
    // too, whole, as peft's modules_to_save: they are unit 0, outside the layers (else empty).
    std::vector<model::hf_parameter> trained;
    embeddings_train = vocab.grown();
    if (vocab.grown()) {
      for (const auto& p : net->hf_parameters()) {
        if (!model::is_vocab_parameter(p.name)) continue;
        p.tensor.requires_grad_(true);
        trained.push_back(p);
      }
    }
    // The base directory, opened once: the frozen weights, and a grown vocabulary's initial rows.
    const auto base = model::open_resized_hf_weights(model_files, net->hf_parameters(), vocab.model_vocab);
    // Every rank holds the whole frozen base in the base's dtype on its device (no fp32 copy of the
    // model, no optimizer state, no sharding), read tensor by tensor.
    net->load_frozen(*base, dtype_of(spec.model.lora.base_dtype.value_or(spec.train.dtype)), device);
    const auto& adapters = net->lora_parameters();
    trained.insert(trained.end(), adapters.begin(), adapters.end());
    const vocab_and_adapters initial(vocab.grown() ? base.get() : nullptr, model::lora_init(adapters, spec.train.seed));
    optimizer = std::make_unique<zero_optimizer>(trained, initial, group, zo, wait);
  }

  // data.eval, checked as data.train is; its errors name the field.
  void open_eval_data(bool verify) {
    try {
      eval_data = std::make_shared<const data::dataset>(spec.data.eval);
      if (spec.data.verify && verify) verify_data_checksums(spec.data.eval);
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("data.eval: ") + e.what());
    }
  }

  // Rows `samples` of the eval data set as one micro-batch of micro_batch_size rows (the rest
  // padding without labels).
  batch_tensors eval_batch(const std::vector<std::int64_t>& samples) const {
    const std::int64_t B = spec.train.micro_batch_size, T = spec.train.seq_len;
    data::micro_batch mb;
    if (reward) {  // pairs `samples` (pair 0 for a rank without any: not counted)
      data::fill_pairs_batch(*eval_data, samples.empty() ? std::vector<std::int64_t>{0} : samples, mb);
      return to_tensors(mb);
    }
    mb.batch_size = B;
    mb.seq_len = T;
    mb.tokens.assign(static_cast<std::size_t>(B * T), eval_data->info().pad_id);
    mb.loss_mask.assign(static_cast<std::size_t>(B * T), 0);
    mb.lengths.assign(static_cast<std::size_t>(B), 0);
    for (std::size_t b = 0; b < samples.size(); ++b) {
      const auto row = static_cast<std::int64_t>(b) * T;
      mb.lengths[b] = eval_data->read_sample(samples[b], mb.tokens.data() + row, mb.loss_mask.data() + row, T);
    }
    return to_tensors(mb);
  }

  // The summed loss of one eval micro-batch: layer by layer, each unit gathered for its forward.
  double eval_forward(const batch_tensors& b, bool counted) {
    const auto& ctx = context_of(b.ids.size(1));
    const auto& layers = net->layers();
    auto x = net->embed_checked(b.ids);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const auto unit = zero_optimizer::layer_unit(static_cast<std::int64_t>(l));
      optimizer->gather(unit);
      optimizer->prefetch(unit + 1);
      auto layer = layers[l];
      x = layer->forward(x, ctx);
      optimizer->release(unit);
    }
    return head_loss(x, b, counted).item<double>();
  }

  eval_result evaluate() {
    if (!eval_data) throw std::logic_error("causal_lm_engine::evaluate: the spec has no data.eval");
    check_cancelled(cancelled);
    const auto started = std::chrono::steady_clock::now();
    const std::int64_t world = group.size(), rank = group.rank();
    const std::int64_t n = reward ? eval_data->size() / 2 : eval_data->size();  // samples, or pairs
    const std::int64_t B = spec.train.micro_batch_size;
    const std::int64_t per_rank = (n + world - 1) / world;  // the most samples a rank takes
    const std::int64_t batches = (per_rank + B - 1) / B;     // the same count on every rank
    model::eval_scope no_dropout(*net);  // and training mode back however evaluate() ends
    torch::NoGradGuard no_grad;
    double loss = 0, labels = 0;
    optimizer->gather(0);
    std::int64_t next = rank;
    for (std::int64_t m = 0; m < batches; ++m) {
      check_cancelled(cancelled);
      std::vector<std::int64_t> samples;
      for (; static_cast<std::int64_t>(samples.size()) < B && next < n; next += world) samples.push_back(next);
      const auto b = eval_batch(samples);
      if (!samples.empty()) labels += b.label_count;
      loss += eval_forward(b, !samples.empty());
    }
    optimizer->release(0);
    const auto pairs = reward_step.take();
    const auto sums = all_reduce_sum({loss, labels, pairs[0], pairs[1], pairs[2]});
    eval_result r;
    r.labels = static_cast<std::int64_t>(sums[1].item<double>());
    r.loss = r.labels > 0 ? sums[0].item<double>() / static_cast<double>(r.labels) : 0.0;
    if (reward) r.reward = reward_metrics_of(sums.slice(0, 2), sums[1].item<double>());
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return r;
  }

  batch_tensors to_tensors(const data::micro_batch& mb) const {
    const std::int64_t B = mb.batch_size, T = mb.seq_len;
    const std::int64_t used = std::min<std::int64_t>(T, spec.train.seq_len);
    auto ids = torch::from_blob(const_cast<std::int64_t*>(mb.tokens.data()), {B, T}, torch::kInt64)
                   .slice(1, 0, used)
                   .clone();
    auto mask = torch::from_blob(const_cast<std::uint8_t*>(mb.loss_mask.data()), {B, T}, torch::kUInt8)
                    .slice(1, 0, used)
                    .to(torch::kBool);
    auto lengths = torch::from_blob(const_cast<std::int64_t*>(mb.lengths.data()), {B, 1}, torch::kInt64);
    auto real = torch::arange(used, torch::kInt64).unsqueeze(0) < lengths;  // (B, T)
    auto labels = torch::where(mask.logical_and(real), ids, torch::full_like(ids, -100));
    // Checked here, on the host: the model's embed_checked then reads nothing back from the device.
    // The labels are these ids or -100.
    model::check_token_ids(ids, "input_ids", net->config().vocab_size, false);
    const double count = reward ? static_cast<double>(B / 2)                         // pairs
                                : labels.slice(1, 1).ne(-100).sum().item<double>();  // host tensors: no wait
    if (!device.is_cuda()) return {ids, labels, count};
    // From pinned memory the copies queue behind the work before them and the host goes on.
    return {ids.pin_memory().to(device, /*non_blocking=*/true),
            labels.pin_memory().to(device, /*non_blocking=*/true), count};
  }

  fetched_step fetch_step() {
    fetched_step f;
    f.step = loader->step();
    data::micro_batch mb;
    for (int m = 0; m < spec.train.grad_accum; ++m) {
      loader->next(mb);
      f.samples.insert(f.samples.end(), mb.sample_ids.begin(), mb.sample_ids.end());
      f.batches.push_back(to_tensors(mb));
      f.labels += f.batches.back().label_count;
      for (auto n : mb.lengths)
        f.tokens += static_cast<double>(std::min<std::int64_t>(n, spec.train.seq_len));
    }
    return f;
  }

  // The summed loss of a micro-batch from the last layer's output `hidden` (B, T, C): the causal
  // LM loss over its labels (decoder::head_loss), or a reward model's pairwise loss over its pairs
  // (rows i and B/2 + i: chosen and rejected), whose sums reward_step adds up unless `counted` is
  // false (an evaluation's filler batch).
  torch::Tensor head_loss(const torch::Tensor& hidden, const batch_tensors& b, bool counted = true) {
    if (!reward) return net->head_loss(hidden, b.labels, /*sum=*/true);
    const auto scores = net->sequence_scores(hidden, b.ids).squeeze(-1).to(torch::kFloat);  // (B)
    const std::int64_t pairs = scores.size(0) / 2;
    const auto chosen = scores.slice(0, 0, pairs), rejected = scores.slice(0, pairs);
    if (counted) reward_step.add(chosen.detach(), rejected.detach());
    return model::pairwise_reward_loss(chosen, rejected) * (counted ? 1.0 : 0.0);
  }

  // Forward and backward of micro-batch `micro_batch` (0 first) of a step; the gradient is that
  // of the summed loss (decoder::head_loss) × scale. Returns the summed loss, 0-dim on the device
  // (not read).
  torch::Tensor forward_backward(const batch_tensors& b, double scale, int micro_batch) {
    if (!recompute && !kept_graphs) {
      if (graph) return graph->run(b.ids, b.labels, scale, micro_batch);
      return whole_pass(b, step_graph::loss_scale(b.ids, scale));
    }
    const auto& ctx = context_of(b.ids.size(1));
    if (kept_graphs) return forward_backward_kept(b, scale, ctx);
    // Layer by layer: a forward without autograd keeps each layer's input, then each layer is
    // recomputed with autograd just before its backward (with the weights of its unit gathered;
    // the last layers_kept_gathered layers stay gathered from the forward). With dropout the
    // generator's state before each piece is kept, so the recomputation drops what the first pass
    // dropped, and the state after the first pass is restored at the end.
    const auto& layers = net->layers();
    std::vector<torch::Tensor> inputs, rng_states;  // rng_states: before embed, before layer l
    auto generator = at::globalContext().defaultGenerator(device);
    torch::Tensor rng_after_forward;
    {
      torch::NoGradGuard no_grad;
      if (save_rng) rng_states.push_back(generator.get_state());
      auto x = net->embed_checked(b.ids);
      for (std::size_t l = 0; l < layers.size(); ++l) {
        const auto unit = zero_optimizer::layer_unit(static_cast<std::int64_t>(l));
        optimizer->gather(unit);
        optimizer->prefetch(unit + 1);  // the next layer's gather overlaps this layer
        inputs.push_back(x);
        if (save_rng) rng_states.push_back(generator.get_state());
        auto layer = layers[l];
        x = layer->forward(x, ctx);
        if (l + layers_kept_gathered < layers.size()) optimizer->release(unit);  // else kept for the backward
      }
      inputs.push_back(x);
      if (save_rng) rng_after_forward = generator.get_state();
    }
    prefetch_below_kept(layers.size());
    auto last = inputs.back().detach().requires_grad_(true);
    auto sum = head_loss(last, b);
    (sum * scale).backward();
    auto grad = last.grad();
    for (std::size_t l = layers.size(); l-- > 0;) {
      const auto unit = zero_optimizer::layer_unit(static_cast<std::int64_t>(l));
      optimizer->gather(unit);
      if (l > 0) optimizer->prefetch(unit - 1);
      if (save_rng) generator.set_state(rng_states[l + 1]);
      auto in = inputs[l].detach().requires_grad_(true);
      auto layer = layers[l];
      layer->forward(in, ctx).backward(grad);
      grad = in.grad();
      if (layers_reduced_in_backward) optimizer->reduce_grads(unit, last_micro_batch);
      optimizer->release(unit);
    }
    if (save_rng) generator.set_state(rng_states[0]);
    if (embeddings_train) net->embed_checked(b.ids).backward(grad);  // else (LoRA) the embeddings are frozen
    if (save_rng) generator.set_state(rng_after_forward);
    return sum;
  }

  // The whole model's forward, loss and backward of the loss × scale (0-dim fp32 on the device),
  // as one pass (step_graph's, when captured).
  torch::Tensor whole_pass(const batch_tensors& b, const torch::Tensor& scale) {
    const auto& ctx = context_of(b.ids.size(1));
    model::residual_stream x{net->embed_checked(b.ids), {}};
    for (auto layer : net->layers()) x = layer->forward(x, ctx);  // holders share the module
    auto sum = head_loss(x.sum(), b);
    (sum * scale.to(sum.scalar_type())).backward();
    return sum;
  }

  // ZeRO-3 without recomputation (FSDP2's order). Forward: each layer runs under autograd on its
  // input stream detached from the graph below (one graph per layer), with its unit gathered (the
  // next one's gather prefetched), and its unit is released right after, so the layer's graph
  // keeps its activations but its weights hold no memory. The stream between two layers leaves
  // the last add pending (model::residual_stream), as the whole pass does: the next layer's norm
  // adds it in its kernel. Backward, last layer first: gather the layer's unit again (refilling
  // the weights its graph refers to), prefetch the one below, run the layer's backward from its
  // kept output, reduce-scatter its gradients, release it. The last layers_kept_gathered layers
  // (at least the last) stay gathered from their forward to their backward, and the head's
  // forward and backward overlap the gather of the layer below them.
  torch::Tensor forward_backward_kept(const batch_tensors& b, double scale, const model::attention_context& ctx) {
    const auto& layers = net->layers();
    const std::size_t count = layers.size();
    std::vector<model::residual_stream> inputs(count), outputs(count);  // per layer: graph roots
    auto embedded = net->embed_checked(b.ids);
    model::residual_stream x{embedded, {}};
    for (std::size_t l = 0; l < count; ++l) {
      const auto unit = zero_optimizer::layer_unit(static_cast<std::int64_t>(l));
      optimizer->gather(unit);
      optimizer->prefetch(unit + 1);  // the next layer's gather overlaps this layer
      inputs[l] = graph_root(x);
      auto layer = layers[l];
      outputs[l] = layer->forward(inputs[l], ctx);
      x = outputs[l];
      if (l + layers_kept_gathered < count)
        optimizer->release(unit);  // the graph keeps the tensors, not the bytes
    }
    prefetch_below_kept(count);
    auto last = x.sum().detach().requires_grad_(true);  // the last add's gradient is last's to both
    auto sum = head_loss(last, b);
    (sum * scale).backward();
    model::residual_stream grad{last.grad(), last.grad()};
    for (std::size_t l = count; l-- > 0;) {
      const auto unit = zero_optimizer::layer_unit(static_cast<std::int64_t>(l));
      optimizer->gather(unit);
      if (l > 0) optimizer->prefetch(unit - 1);
      backward_stream(outputs[l], grad);
      grad = {inputs[l].base.grad(), inputs[l].delta.defined() ? inputs[l].delta.grad() : torch::Tensor()};
      outputs[l] = {};  // the layer's graph and activations go
      inputs[l] = {};
      if (layers_reduced_in_backward) optimizer->reduce_grads(unit, last_micro_batch);
      optimizer->release(unit);
    }
    if (embedded.requires_grad()) embedded.backward(grad.base);  // LoRA: the embeddings may be frozen
    return sum;
  }

  // After the forward of `count` layers: the gather of the highest layer not kept gathered starts,
  // to overlap the head's forward and backward and the kept layers' backward.
  void prefetch_below_kept(std::size_t count) {
    if (count > layers_kept_gathered)
      optimizer->prefetch(
          zero_optimizer::layer_unit(static_cast<std::int64_t>(count - layers_kept_gathered) - 1));
  }

  // x's tensors detached from the graph that made them, each a new root requiring its gradient.
  static model::residual_stream graph_root(const model::residual_stream& x) {
    return {x.base.detach().requires_grad_(true),
            x.delta.defined() ? x.delta.detach().requires_grad_(true) : torch::Tensor()};
  }

  // The backward of a layer's graph from its output stream `out`, given the gradient of each part
  // (a part left undefined by the layer takes none).
  static void backward_stream(const model::residual_stream& out, const model::residual_stream& grad) {
    if (out.delta.defined()) {
      torch::autograd::backward({out.base, out.delta}, {grad.base, grad.delta});
    } else {
      out.base.backward(grad.base);
    }
  }

  torch::Tensor all_reduce_sum(std::vector<double> values) {
    return train::all_reduce_sum(group, device, cancelled, std::move(values));
  }

  step_result step() {
    check_cancelled(cancelled);
    const auto started = std::chrono::steady_clock::now();
    fetched_step f = next_batches ? std::move(*next_batches) : fetch_step();
    next_batches.reset();
    const std::int64_t step_index = f.step;
    const auto& batches = f.batches;
    // Every rank weighs its summed loss by 1 / (label tokens of the global batch), so the reduced
    // gradient is that of the global mean whatever the world size.
    const auto counts =
        all_reduce_sum({f.labels, f.tokens, checkpoint_requested ? 1.0 : 0.0, preempt_requested ? 1.0 : 0.0});
    checkpoint_requested = false;
    preempt_requested = false;
    const double global_labels = std::max(1.0, counts[0].item<double>());

    optimizer->zero_grad_shards();
    optimizer->reset_gathered_peak();
    optimizer->gather(0);
    torch::Tensor local_loss;  // on the device: no host read until the update is queued
    for (std::size_t m = 0; m < batches.size(); ++m) {
      last_micro_batch = m + 1 == batches.size();
      add_loss(local_loss, forward_backward(batches[m], 1.0 / global_labels, static_cast<int>(m)));
    }
    if (steps_done + 1 < total_steps) next_batches = fetch_step();  // while the device works
    for (std::size_t u = 0; u < optimizer->unit_count(); ++u) {
      if (u == 0 || !layers_reduced_in_backward) optimizer->reduce_grads(u);
    }
    optimizer->release(0);
    gathered_peak_bytes = optimizer->gathered_peak_bytes();
    optimizer->synchronize();

    auto r = finish_step(*optimizer, spec, group, device, cancelled, step_index, total_steps, local_loss,
                         counts, std::move(f.samples), started);
    if (reward) r.reward = reward_metrics_of(all_reduce_sum(reward_step.take()), counts[0].item<double>());
    ++steps_done;
    return r;
  }
};

causal_lm_engine::causal_lm_engine(const config::job_spec& spec, comm::process_group& group,
                                   const std::atomic<bool>* cancelled, bool data_verified)
    : impl_(std::make_unique<impl>(spec, group, cancelled, data_verified)) {}

causal_lm_engine::~causal_lm_engine() = default;

int causal_lm_engine::cuda_device_for(int rank) {
  const auto count = static_cast<int>(torch::cuda::device_count());
  return count == 0 ? -1 : rank % count;
}

std::int64_t causal_lm_engine::total_steps() const { return impl_->total_steps; }
std::int64_t causal_lm_engine::steps_done() const { return impl_->steps_done; }
std::int64_t causal_lm_engine::parameter_count() const { return impl_->optimizer->parameter_count(); }
std::int64_t causal_lm_engine::global_batch() const { return impl_->global_batch(); }

double causal_lm_engine::flops_per_token() const {
  const auto& net = *impl_->net;
  const auto& c = net.config();
  std::int64_t adapters = 0;
  for (const auto& p : net.lora_parameters()) adapters += p.tensor.numel();
  const double flops = train::flops_per_token(net.parameter_count() + adapters, c.num_layers, c.hidden_size,
                                              impl_->spec.train.seq_len);
  // A frozen base computes no weight gradients: 4 FLOPs per weight and token, not 6. With LoRA the
  // optimizer's weights beyond the adapters (a grown vocabulary's embedding and head) train.
  const std::int64_t frozen = net.parameter_count() - (parameter_count() - adapters);
  return net.has_lora() ? flops - 2.0 * static_cast<double>(frozen) : flops;
}

double causal_lm_engine::peak_flops() const {
  return impl_->peak_flops;
}

std::int64_t causal_lm_engine::gathered_peak_bytes() const { return impl_->gathered_peak_bytes; }

step_result causal_lm_engine::train_step() { return impl_->step(); }
bool causal_lm_engine::step_graphed() const { return impl_->graph && impl_->graph->captured(); }

std::string causal_lm_engine::step_graph_refusal(const config::job_spec& spec, bool dropout) {
  // The whole-model pass only (see forward_backward), of a causal LM, without dropout.
  if (!spec.train.cuda_graph) return {};
  const std::string no = "train.cuda_graph: the step runs without CUDA graphs: ";
  if (spec.train.activation_checkpointing)
    return no + "train.activation_checkpointing recomputes each layer between the optimizer's gathers";
  if (spec.zero.stage == 3) return no + "ZeRO stage 3 gathers and releases each layer inside the step";
  if (spec.workload == config::workload_kind::reward_model)
    return no + "workload reward_model adds up its pairs' scores outside the loss";
  if (dropout) return no + "the model has dropout, and a replayed graph would draw the same mask";
  return {};
}

std::string causal_lm_engine::step_graph_status() const {
  const auto& d = *impl_;
  if (!d.device.is_cuda() || !d.spec.train.cuda_graph) return {};
  if (!d.graph) return step_graph_refusal(d.spec, d.dropout());
  return d.graph->captured()
             ? "train.cuda_graph: each micro-batch's forward, loss and backward replay a CUDA graph"
             : "";
}
bool causal_lm_engine::has_eval() const { return impl_->eval_data != nullptr; }
eval_result causal_lm_engine::evaluate() { return impl_->evaluate(); }
void causal_lm_engine::request_checkpoint(bool preempted) { impl_->request_checkpoint(preempted); }
checkpoint_part causal_lm_engine::checkpoint() { return impl_->checkpoint(); }

nlohmann::json causal_lm_engine::checkpoint_extra() const {
  auto extra = impl_->checkpoint_extra(model::to_hf_json(impl_->net->config()));
  // LoRA: the tensors are the adapters (and a grown vocabulary's embedding and head); the base is
  // referred to by its directory.
  if (impl_->net->has_lora()) extra[ckpt::lora_extra_key] = model::lora_to_json(impl_->net->lora());
  return extra;
}

void causal_lm_engine::restore(const std::string& dir, const ckpt::manifest& m) {
  auto& d = *impl_;
  const std::string where = dir + ": ";
  check_checkpoint_vocab(dir, m, d.net->config().vocab_size);
  const auto* saved_config =
      m.extra.is_object() && m.extra.contains("model_config") ? &m.extra["model_config"] : nullptr;
  const bool saved_reward =
      saved_config && saved_config->is_object() && saved_config->value("num_labels", 0) > 0;
  if (saved_config && saved_reward != d.reward)
    throw std::invalid_argument(where +
                                (saved_reward ? "holds a reward model (a score head), this job is workload " +
                                                    std::string(config::to_string(d.spec.workload))
                                              : "holds a causal LM, this job is workload reward_model") +
                                "; resume with the workload it was written with");
  const bool saved_lora = m.extra.is_object() && m.extra.contains(ckpt::lora_extra_key);
  if (saved_lora != d.net->has_lora())
    throw std::invalid_argument(where + (saved_lora ? "holds LoRA adapters, this job trains the whole model"
                                                     : "holds a whole model, this job trains LoRA adapters (model.lora)") +
                                "; resume with the model section it was written with");
  if (saved_lora) {
    const auto saved = model::lora_from_json(m.extra[ckpt::lora_extra_key], where + "extra.lora");
    const auto& mine = d.net->lora();
    if (saved.r != mine.r || saved.alpha != mine.alpha || saved.target_modules != mine.target_modules)
      throw std::invalid_argument(where + "written with model.lora " + model::lora_to_json(saved).dump() +
                                  ", this job has " + model::lora_to_json(mine).dump() +
                                  "; r, alpha and target_modules must stay as they were to resume");
  }
  d.restore(dir, m);
  d.make_step_graph();  // captured anew from the restored weights' step on
}

std::vector<float> causal_lm_engine::full_weights() { return impl_->full_weights(); }

}  // namespace cohort::core::train

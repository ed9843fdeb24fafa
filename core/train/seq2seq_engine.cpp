// seq2seq_engine: a T5 and seq2seq data set-up, the step (micro-batches, forward/backward, at
// ZeRO-3 one block at a time; ZeRO reduction, clipping, AdamW), evaluation and checkpoints.
#include "core/train/seq2seq_engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include <torch/torch.h>

#include "core/data/batch_loader.hpp"
#include "core/model/adamw.hpp"
#include "core/model/model_config.hpp"
#include "core/model/t5.hpp"
#include "core/model/vocab_resize.hpp"
#include "core/model/weight_source.hpp"
#include "core/train/engine_checkpoint.hpp"
#include "core/train/engine_common.hpp"
#include "core/train/job_preflight.hpp"
#include "core/train/lr_schedule.hpp"
#include "core/train/mfu.hpp"
#include "core/train/run_control.hpp"
#include "core/train/vocab_plan.hpp"
#include "core/train/zero_optimizer.hpp"

namespace cohort::core::train {

namespace {

struct batch_tensors {
  torch::Tensor ids, mask;  // (B, S) int64 source ids and their 0/1 attention mask
  torch::Tensor labels;     // (B, T) int64 target ids, -100 on padding
  double label_count = 0;
  double tokens = 0;        // real source and target ids
};

batch_tensors to_tensors(data::seq2seq_batch& b, const torch::Device& device) {
  const std::int64_t B = b.batch_size, S = b.source_len, T = b.target_len;
  batch_tensors t;
  t.ids = torch::from_blob(b.input_ids.data(), {B, S}, torch::kInt64).to(device);  // .to copies
  t.mask = torch::from_blob(b.attention_mask.data(), {B, S}, torch::kInt64).to(device);
  auto labels = torch::from_blob(b.labels.data(), {B, T}, torch::kInt64);
  t.label_count = labels.ne(data::ignore_label).sum().item<double>();
  t.labels = labels.to(device);
  if (!device.is_cuda()) {  // from_blob does not own b's buffers, which the next batch reuses
    t.ids = t.ids.clone();
    t.mask = t.mask.clone();
    t.labels = t.labels.clone();
  }
  for (std::int64_t i = 0; i < B; ++i)
    t.tokens += static_cast<double>(b.source_lengths[static_cast<std::size_t>(i)] +
                                    b.target_lengths[static_cast<std::size_t>(i)]);
  return t;
}

// The summed cross-entropy (fp32) of the batch's label tokens for the logits (B, T, V).
torch::Tensor summed_loss(const torch::Tensor& logits, const batch_tensors& b) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), b.labels.reshape({-1}),
                                {}, at::Reduction::Sum, data::ignore_label);
}

torch::Tensor summed_loss(model::t5_model_impl& net, const batch_tensors& b) {
  return summed_loss(net.forward(b.ids, b.mask, b.labels).logits, b);
}

// A tensor's value as a new autograd leaf (requiring grad where the tensor does), so that what
// reads it keeps a graph of its own and its gradient gathers in the leaf's .grad.
torch::Tensor leaf_of(const torch::Tensor& t) { return t.detach().requires_grad_(t.requires_grad()); }

// One micro-batch run through the T5 block by block (the blocks are the units 1 .. L + D in
// order: the encoder's, then the decoder's). Each block reads its input as a leaf (its own graph,
// kept from its forward to its backward) and the biases and the encoder's output as leaves shared
// by its stack; what feeds them (the embeddings, the relative-position tables, the final norms,
// all in unit 0) keeps its own graph from the leaf back.
struct block_pass {
  torch::Tensor source_embedded, target_embedded;  // embed(ids), embed(shifted labels)
  torch::Tensor encoder_bias, encoder_bias_in;     // and its leaf
  torch::Tensor self_bias, self_bias_in;           // the decoder's, and its leaf
  torch::Tensor encoder_last;                      // leaf of the last encoder block's output
  torch::Tensor memory, memory_in;                 // encoder_final(encoder_last), and its leaf
  torch::Tensor decoder_last;                      // leaf of the last decoder block's output
  std::vector<torch::Tensor> inputs, outputs;      // per block
};

// Training mode back however an evaluation ends.
class eval_mode {
 public:
  explicit eval_mode(torch::nn::Module& m) : m_(m), was_training_(m.is_training()) { m_.eval(); }
  ~eval_mode() { m_.train(was_training_); }
  eval_mode(const eval_mode&) = delete;
  eval_mode& operator=(const eval_mode&) = delete;

 private:
  torch::nn::Module& m_;
  bool was_training_;
};

}  // namespace

struct seq2seq_engine::impl : engine_state {
  model::t5_model net{nullptr};

  impl(const config::job_spec& s, comm::process_group& g, const std::atomic<bool>* c, bool data_verified)
      : engine_state(s, g, c) {
    const auto& train = spec.train;
    if (spec.data.train.empty())
      throw std::invalid_argument("data.train: missing; a T5 job needs a seq2seq data set written by "
                                  "`cohort-data build --template-source ... --template-target ...`");
    auto cfg = model::read_t5_config(model_files.dir);
    cfg.dtype = "float32";  // the masters' dtype, which checkpoints record
    seed_rank(train, group.rank());
    data = open_train_data(spec, group.rank());
    if (spec.data.verify && !data_verified && !data->streamed()) verify_data_checksums(spec.data.train);
    check_data(*data, "data.train");
    if (!spec.data.eval.empty()) {
      try {
        eval_data = std::make_shared<const data::dataset>(spec.data.eval);
        if (spec.data.verify && !data_verified) verify_data_checksums(spec.data.eval);
      } catch (const std::exception& e) {
        throw std::invalid_argument(std::string("data.eval: ") + e.what());
      }
      check_data(*eval_data, "data.eval");
    }
    const auto vocab = plan_vocab(spec, cfg.vocab_size, data->info(), eval_data ? &eval_data->info() : nullptr);
    cfg.vocab_size = vocab.vocab;
    // fp32 on the host, never written: torch::empty's pages stay untouched until the optimizer
    // gives each weight its data (its own device tensor; stage 3: views of the gathered units).
    net = model::t5_model(cfg);
    loader = std::make_unique<data::batch_loader>(data, loader_options_of(train, group, data::batch_kind::seq2seq));
    total_steps = train.max_steps > 0 ? train.max_steps : loader->steps_per_epoch() * train.epochs;

    const zero_options zo = zero_options_of(spec, device);
    const auto wait = [this](const std::shared_ptr<comm::work>& w) { wait_for(w, group, cancelled); };
    optimizer = std::make_unique<zero_optimizer>(
        net->hf_parameters(),
        *model::open_resized_hf_weights(model_files, net->hf_parameters(), vocab.model_vocab), group, zo,
        wait);
    net->to(device);
    if (device.is_cuda()) peak_flops = peak_bf16_flops(cuda_device_name(device.index()));
  }

  static void check_data(const data::dataset& d, const char* field) {
    if (!d.is_seq2seq())
      throw std::invalid_argument(std::string(field) + ": \"" + d.dir() + "\" is a " + d.info().kind +
                                  " data set; a T5 trains on seq2seq data sets");
  }

  torch::Tensor all_reduce_sum(std::vector<double> values) {
    return train::all_reduce_sum(group, device, cancelled, std::move(values));
  }

  std::size_t encoder_blocks() const { return net->encoder_blocks().size(); }
  std::size_t block_count() const { return encoder_blocks() + net->decoder_blocks().size(); }
  model::t5_block block(std::size_t k) const {
    const auto L = encoder_blocks();
    return k < L ? net->encoder_blocks()[k] : net->decoder_blocks()[k - L];
  }
  static std::size_t block_unit(std::size_t k) {
    return zero_optimizer::layer_unit(static_cast<std::int64_t>(k));
  }

  // The forward of block_pass (unit 0 gathered by the caller): each block's unit gathered (the
  // next one's gather prefetched) and released after its forward, except the last block's when
  // keep_last (a step's backward starts with it). Returns the summed loss, with its graph back to
  // the last block's output where autograd is on.
  torch::Tensor forward_blocks(const batch_tensors& b, block_pass& p, bool keep_last) {
    auto& m = *net;
    const std::size_t L = encoder_blocks(), count = block_count();
    p.inputs.assign(count, {});
    p.outputs.assign(count, {});
    p.source_embedded = m.embed(b.ids);
    p.encoder_bias = m.encoder_bias(b.ids.size(1), b.mask);
    p.encoder_bias_in = leaf_of(p.encoder_bias);
    torch::Tensor cross_bias;
    auto x = p.source_embedded;
    for (std::size_t k = 0; k < count; ++k) {
      if (k == L) {  // the encoder's output; the decoder starts
        p.encoder_last = leaf_of(x);
        p.memory = m.encoder_final(p.encoder_last);
        p.memory_in = leaf_of(p.memory);
        const auto shifted = m.shift_right(b.labels);
        p.target_embedded = m.embed(shifted);
        p.self_bias = m.decoder_self_bias(shifted.size(1));
        p.self_bias_in = leaf_of(p.self_bias);
        cross_bias = m.mask_bias(b.mask, p.self_bias.options());
        x = p.target_embedded;
      }
      optimizer->gather(block_unit(k));
      optimizer->prefetch(block_unit(k + 1));  // the next block's gather overlaps this one
      p.inputs[k] = leaf_of(x);
      p.outputs[k] = k < L ? block(k)->forward(p.inputs[k], p.encoder_bias_in, {}, {})
                           : block(k)->forward(p.inputs[k], p.self_bias_in, p.memory_in, cross_bias);
      x = p.outputs[k];
      if (!keep_last || k + 1 < count) optimizer->release(block_unit(k));  // the graph keeps no bytes
    }
    p.decoder_last = leaf_of(x);
    return summed_loss(m.head(m.decoder_final(p.decoder_last)), b);
  }

  // ZeRO-3 (FSDP2's order, as causal_lm_engine's forward_backward_kept): forward_blocks, the
  // head's backward, then each block last to first with its unit gathered again (the one below
  // prefetched), its gradients reduce-scattered and its unit released. The decoder's blocks add
  // their gradients of the encoder's output in memory_in, which the encoder's final norm takes
  // back to the last encoder block; unit 0's gradients (embeddings, tables, final norms) come from
  // the leaves last. Returns the summed loss, 0-dim on the device (not read).
  torch::Tensor forward_backward_blocks(const batch_tensors& b, double scale) {
    const std::size_t L = encoder_blocks(), count = block_count();
    block_pass p;
    const auto sum = forward_blocks(b, p, /*keep_last=*/true);
    if (count >= 2) optimizer->prefetch(block_unit(count - 2));
    (sum * scale).backward();
    auto grad = p.decoder_last.grad();
    for (std::size_t k = count; k-- > 0;) {
      if (k + 1 == L) {  // from the decoder to the encoder
        torch::autograd::backward({p.target_embedded, p.self_bias}, {grad, p.self_bias_in.grad()});
        p.memory.backward(p.memory_in.grad());
        grad = p.encoder_last.grad();
      }
      optimizer->gather(block_unit(k));
      if (k > 0) optimizer->prefetch(block_unit(k - 1));
      p.outputs[k].backward(grad);
      grad = p.inputs[k].grad();
      p.outputs[k] = torch::Tensor();  // the block's graph and activations go
      p.inputs[k] = torch::Tensor();
      optimizer->reduce_grads(block_unit(k));
      optimizer->release(block_unit(k));
    }
    torch::autograd::backward({p.source_embedded, p.encoder_bias}, {grad, p.encoder_bias_in.grad()});
    return sum;
  }

  step_result step() {
    check_cancelled(cancelled);
    const auto started = std::chrono::steady_clock::now();
    const auto& train = spec.train;
    const std::int64_t step_index = loader->step();
    std::vector<batch_tensors> batches;
    double labels = 0, tokens = 0;
    data::seq2seq_batch sb;
    std::vector<std::int64_t> samples;
    for (int m = 0; m < train.grad_accum; ++m) {
      loader->next(sb);
      samples.insert(samples.end(), sb.sample_ids.begin(), sb.sample_ids.end());
      batches.push_back(to_tensors(sb, device));
      labels += batches.back().label_count;
      tokens += batches.back().tokens;
    }
    const auto counts = all_reduce_sum({labels, tokens, checkpoint_requested ? 1.0 : 0.0,
                                        preempt_requested ? 1.0 : 0.0});
    checkpoint_requested = false;
    preempt_requested = false;
    const double global_labels = std::max(1.0, counts[0].item<double>());

    optimizer->zero_grad_shards();
    optimizer->reset_gathered_peak();
    torch::Tensor local_loss;  // on the device: no host read until the update is queued
    if (spec.zero.stage == 3) {  // block by block; unit 0 for the whole step
      optimizer->gather(0);
      for (const auto& b : batches) add_loss(local_loss, forward_backward_blocks(b, 1.0 / global_labels));
      optimizer->reduce_grads(0);
      optimizer->release(0);
    } else {  // the whole model's graph at once
      for (const auto& b : batches) {
        const auto sum = summed_loss(*net, b);
        (sum / global_labels).backward();
        add_loss(local_loss, sum);
      }
      for (std::size_t u = 0; u < optimizer->unit_count(); ++u) optimizer->reduce_grads(u);
    }
    gathered_peak_bytes = optimizer->gathered_peak_bytes();
    optimizer->synchronize();

    auto r = finish_step(*optimizer, spec, group, device, cancelled, step_index, total_steps, local_loss, counts,
                         std::move(samples), started);
    ++steps_done;
    return r;
  }

  eval_result evaluate() {
    if (!eval_data) throw std::logic_error("seq2seq_engine::evaluate: the spec has no data.eval");
    check_cancelled(cancelled);
    const auto started = std::chrono::steady_clock::now();
    const std::int64_t world = group.size(), n = eval_data->size(), B = spec.train.micro_batch_size;
    eval_mode no_dropout(*net);
    torch::NoGradGuard no_grad;
    optimizer->gather(0);  // and each block's unit in turn (stage 3), the same on every rank
    double loss = 0, labels = 0;
    data::seq2seq_batch sb;
    // Stage 3 gathers each block per batch: every rank runs as many batches, the last ones of a
    // rank with fewer samples possibly empty.
    const std::int64_t per_rank = (n + world - 1) / world, batches = (per_rank + B - 1) / B;
    std::int64_t next = group.rank();
    for (std::int64_t m = 0; m < batches; ++m) {
      check_cancelled(cancelled);
      std::vector<std::int64_t> samples;
      for (; static_cast<std::int64_t>(samples.size()) < B && next < n; next += world) samples.push_back(next);
      data::fill_seq2seq_batch(*eval_data, std::move(samples), sb);
      const auto b = to_tensors(sb, device);
      labels += b.label_count;
      block_pass pass;
      loss += forward_blocks(b, pass, /*keep_last=*/false).item<double>();
    }
    optimizer->release(0);
    const auto sums = all_reduce_sum({loss, labels});
    eval_result r;
    r.labels = static_cast<std::int64_t>(sums[1].item<double>());
    r.loss = r.labels > 0 ? sums[0].item<double>() / static_cast<double>(r.labels) : 0.0;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return r;
  }
};

seq2seq_engine::seq2seq_engine(const config::job_spec& spec, comm::process_group& group,
                               const std::atomic<bool>* cancelled, bool data_verified)
    : impl_(std::make_unique<impl>(spec, group, cancelled, data_verified)) {}

seq2seq_engine::~seq2seq_engine() = default;

std::int64_t seq2seq_engine::total_steps() const { return impl_->total_steps; }
std::int64_t seq2seq_engine::steps_done() const { return impl_->steps_done; }
std::int64_t seq2seq_engine::parameter_count() const { return impl_->optimizer->parameter_count(); }
std::int64_t seq2seq_engine::global_batch() const { return impl_->global_batch(); }

double seq2seq_engine::flops_per_token() const {
  const auto& c = impl_->net->config();
  return train::flops_per_token(impl_->net->parameter_count(), c.num_layers + c.num_decoder_layers, c.d_model,
                                impl_->data->seq_len());
}

double seq2seq_engine::peak_flops() const { return impl_->peak_flops; }
std::int64_t seq2seq_engine::gathered_peak_bytes() const { return impl_->gathered_peak_bytes; }
step_result seq2seq_engine::train_step() { return impl_->step(); }
bool seq2seq_engine::has_eval() const { return impl_->eval_data != nullptr; }
eval_result seq2seq_engine::evaluate() { return impl_->evaluate(); }

void seq2seq_engine::request_checkpoint(bool preempted) { impl_->request_checkpoint(preempted); }
std::vector<float> seq2seq_engine::full_weights() { return impl_->full_weights(); }
checkpoint_part seq2seq_engine::checkpoint() { return impl_->checkpoint(); }

nlohmann::json seq2seq_engine::checkpoint_extra() const {
  return impl_->checkpoint_extra(model::to_hf_json(impl_->net->config()));
}

void seq2seq_engine::restore(const std::string& dir, const ckpt::manifest& m) {
  if (!m.extra.contains("model_config") || !model::is_t5(m.extra["model_config"]))
    throw std::invalid_argument(dir + ": holds a decoder-only model, this job trains a T5 (model.hf_dir); "
                                "resume with the model it was written with");
  check_checkpoint_vocab(dir, m, impl_->net->config().vocab_size);
  impl_->restore(dir, m);
}

}  // namespace cohort::core::train

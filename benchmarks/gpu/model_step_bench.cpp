// model_step_bench: times cohort's training step on one GPU — the core/model decoder with bf16
// weights (fused attention through torch_compat), fp32 master weights and AdamW moments, the
// optimizer core/model's adamw_step, ATen's fused AdamW or cohort's AdamW kernel (what the engine
// runs on CUDA), after clipping the gradients' norm to --grad-clip —
// and prints one JSON line: tokens/s, step time, peak GPU memory, parameter count, last loss.
// scripts/gpu-bench runs it beside benchmarks/gpu/torch_reference.py on the same config JSON.
//
//   model_step_bench --config benchmarks/gpu/tinyllama-1.1b.json --batch 8 --seq 2048
//                    [--steps 10] [--warmup 3] [--optimizer cohort|fused|kernel] [--grad-clip 1] [--device
//                    cuda:0]
//                    [--profile N] [--compute-path automatic|plain|fused] [--loss-chunk 2048]
// The step is the engine's: embed, the layers, decoder::head_loss (on the fused path chunked over
// --loss-chunk positions; 0: one chunk), backward, the optimizer; each layer's weights lie in one
// buffer, as the engine's ZeRO units keep them.
// --profile N: after the timed steps, N more steps under the profiler (core/train/step_profiler.hpp),
// then one JSON line per GPU kernel (the 40 longest in total): name, calls and milliseconds per step,
// share of all kernel time — where the step's time goes, without a profiler UI.
#include "core/model/adamw.hpp"
#include "core/model/decoder.hpp"
#include "core/model/fused_ops.hpp"
#include "core/model/model_config.hpp"
#include "core/train/step_profiler.hpp"

#include <ATen/ATen.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#ifdef COHORT_BENCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <chrono>
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace po = boost::program_options;
namespace model = cohort::core::model;

namespace {

struct bench_options {
  std::string config;
  std::int64_t batch = 8;
  std::int64_t seq = 1024;
  int steps = 10;
  int warmup = 3;
  std::string optimizer = "cohort";
  std::string device = "cuda:0";
  double lr = 1e-4;
  double grad_clip = 1.0;
  int profile = 0;
  std::string compute_path = "automatic";
  std::int64_t loss_chunk = 2048;
};

// fp32 master copy of every bf16 weight, with its AdamW state; the gradients clipped to norm
// --grad-clip first (as the baseline and the engine do: the coefficient computed on the device,
// never read on the host within a step), the bf16 weight refreshed from the master after each update (bf16
// compute, fp32 master weights, as the engine does). Kinds:
//   cohort  core/model's adamw_step per tensor (ATen elementwise ops);
//   fused   ATen's fused AdamW over all tensors, the bf16 gradients cast to fp32 first and the
//           bf16 weights cast from the masters after;
//   kernel  cohort's AdamW kernel, one launch for every tensor (fused_adamw_step, what the engine
//           runs on CUDA):
//           reads the bf16 gradient with the clipping scale and writes the bf16 weight in the same
//           pass, no casts of its own.
class mixed_precision_adamw {
 public:
  mixed_precision_adamw(const std::vector<model::hf_parameter>& params, const std::string& kind,
                        double lr, double grad_clip)
      : kind_(kind), grad_clip_(grad_clip) {
    if (kind != "cohort" && kind != "fused" && kind != "kernel") {
      throw std::invalid_argument("--optimizer '" + kind + "' is not known (allowed: cohort, fused, kernel)");
    }
#if TORCH_VERSION_MAJOR < 2
    if (kind == "fused") throw std::invalid_argument("--optimizer fused needs libtorch 2.x (_fused_adamw_)");
#endif
    options_.lr = lr;
    for (const auto& p : params) {
      weights_.push_back(p.tensor);
      masters_.push_back(p.tensor.detach().to(torch::kFloat));
      exp_avg_.push_back(torch::zeros_like(masters_.back()));
      exp_avg_sq_.push_back(torch::zeros_like(masters_.back()));
      states_.emplace_back();  // the same moments, whichever kind updates them
      states_.back().exp_avg = exp_avg_.back();
      states_.back().exp_avg_sq = exp_avg_sq_.back();
      steps_.push_back(torch::zeros({}, masters_.back().options()));
    }
    if (kind == "kernel" && !model::fused_kernels_available(masters_.front())) {
      throw std::invalid_argument("--optimizer kernel needs the CUDA build's kernels and a CUDA --device");
    }
  }

  void step() {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads;
    grads.reserve(weights_.size());
    for (auto& w : weights_) grads.push_back(w.grad().contiguous());
    const auto coef = grad_clip_ > 0 ? model::clip_coefficient(square_sum(grads), grad_clip_) : torch::Tensor();
    if (kind_ == "kernel") {
      std::vector<model::fused_adamw_target> targets;
      for (std::size_t i = 0; i < weights_.size(); ++i) {
        targets.push_back({masters_[i], grads[i], &states_[i], weights_[i]});
        weights_[i].mutable_grad() = torch::Tensor();
      }
      model::fused_adamw_step(targets, options_, 1.0, coef);
      return;
    }
    for (auto& g : grads) {
      g = g.to(torch::kFloat);
      if (coef.defined()) g.mul_(coef);
    }
    if (kind_ == "fused") {
#if TORCH_VERSION_MAJOR >= 2
      at::_foreach_add_(steps_, 1.0);  // the kernel reads the step count; torch.optim bumps it first
      at::_fused_adamw_(masters_, grads, exp_avg_, exp_avg_sq_, {}, steps_, options_.lr,
                        options_.beta1, options_.beta2, options_.weight_decay, options_.eps,
                        /*amsgrad=*/false, /*maximize=*/false);
#endif
    } else {
      for (std::size_t i = 0; i < masters_.size(); ++i) {
        model::adamw_step(masters_[i], grads[i], states_[i], options_);
      }
    }
    for (std::size_t i = 0; i < weights_.size(); ++i) {
      weights_[i].copy_(masters_[i]);
      weights_[i].mutable_grad() = torch::Tensor();
    }
  }

 private:
  // The gradients' sum of squares in fp64, on their device (not read on the host).
  static torch::Tensor square_sum(const std::vector<torch::Tensor>& grads) {
    if (model::fused_kernels_available(grads.front())) return model::fused_square_sum(grads);
    std::vector<torch::Tensor> sums;
    for (const auto& g : grads) sums.push_back(g.to(torch::kDouble).pow(2).sum());
    return torch::stack(sums).sum();
  }

  std::string kind_;
  double grad_clip_;
  model::adamw_options options_;
  std::vector<torch::Tensor> weights_, masters_, exp_avg_, exp_avg_sq_, steps_;
  std::vector<model::adamw_state> states_;
};

// Lays each layer's weights (and those outside the layers) one after another in one buffer, in
// hf_parameters() order, as the engine's ZeRO units keep them: the fused q/k/v and gate/up GEMMs
// then read them in place (decoder.hpp's stacked_rows) instead of concatenating them.
void share_unit_buffers(const std::vector<model::hf_parameter>& params) {
  torch::NoGradGuard no_grad;
  std::map<std::int64_t, std::vector<torch::Tensor>> units;
  for (const auto& p : params) units[p.layer].push_back(p.tensor);
  for (auto& [layer, tensors] : units) {
    std::int64_t numel = 0;
    for (const auto& t : tensors) numel += t.numel();
    auto buffer = torch::empty({numel}, tensors.front().options());
    std::int64_t at = 0;
    for (auto& t : tensors) {
      auto view = buffer.narrow(0, at, t.numel()).view(t.sizes());
      view.copy_(t);
      t.set_data(view);
      at += t.numel();
    }
  }
}

double peak_gpu_gib(const torch::Device& device) {
#ifdef COHORT_BENCH_CUDA
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const auto aggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return static_cast<double>(stats.allocated_bytes[aggregate].peak) / (1024.0 * 1024.0 * 1024.0);
#else
  (void)device;
  return std::nan("");
#endif
}

// Runs `steps` calls of `step` under the profiler run.profile_steps uses (GPU activity only, so
// that the host runs as it does untraced) and prints the longest GPU kernels, then where the GPU
// sat idle: the idle time per step and the longest-idle pairs (the operation before and the one
// the GPU waited for).
template <typename Step>
void profile_kernels(int steps, Step&& step, bool cuda) {
  cohort::core::train::device_recorder recorder;
  if (!recorder.start(cuda)) throw std::logic_error("the profiler is taken");
  for (int i = 0; i < steps; ++i) step();
  const auto r = recorder.stop();
  const auto s = cohort::core::train::summarize_profile(r.spans, r.from_ns, r.to_ns, 1, steps);
  double kernel_ms = 0;
  std::set<std::string> kernels;  // every kernel, not only the longest the summary lists
  for (const auto& span : r.spans) {
    kernel_ms += static_cast<double>(span.end_ns - span.start_ns) / 1e6 / steps;
    kernels.insert(span.name);
  }
  std::cout << nlohmann::json{{"profile_steps", steps},
                              {"kernel_ms_per_step", kernel_ms},
                              {"kernels", kernels.size()}}
                   .dump()
            << std::endl;
  for (const auto& k : s.operations)
    std::cout << nlohmann::json{{"kernel", k.name},
                                {"calls_per_step", k.calls_per_step},
                                {"ms_per_step", k.ms_per_step},
                                {"share", k.share}}
                     .dump()
              << std::endl;
  std::cout << nlohmann::json{{"gpu_idle_ms_per_step", s.idle_ms_per_step}}.dump() << std::endl;
  for (const auto& g : s.idle_gaps)
    std::cout << nlohmann::json{{"idle_between", g.between},
                                {"gaps_per_step", g.gaps_per_step},
                                {"ms_per_step", g.ms_per_step}}
                     .dump()
              << std::endl;
}

int run(const bench_options& o) {
  const torch::Device device(o.device);
  const model::model_config config = model::read_config(o.config);
  if (o.seq > config.max_positions) {
    throw std::invalid_argument("--seq " + std::to_string(o.seq) + " exceeds the config's " +
                                std::to_string(config.max_positions) + " positions");
  }
  torch::manual_seed(0);
  model::decoder net(config, torch::TensorOptions().dtype(torch::kBFloat16).device(device), true);
  net->train();
  net->set_compute_path(model::parse_compute_path(o.compute_path, "--compute-path"));
  net->set_loss_chunk_tokens(o.loss_chunk);
  share_unit_buffers(net->hf_parameters());
  mixed_precision_adamw optimizer(net->hf_parameters(), o.optimizer, o.lr, o.grad_clip);

  auto ids = torch::randint(0, config.vocab_size, {o.batch, o.seq},
                            torch::TensorOptions().dtype(torch::kInt64).device(device));
  float loss = 0.0F;
  const auto ctx = net->context(o.seq, device);
  auto train_step = [&] {
    model::residual_stream x{net->embed(ids), {}};
    for (auto layer : net->layers()) x = layer->forward(x, ctx);
    auto loss = net->head_loss(x.sum(), ids, /*sum=*/false);
    loss.backward();
    optimizer.step();
    return loss;
  };
  torch::Tensor last;
  for (int i = 0; i < o.warmup; ++i) last = train_step();
  loss = last.item<float>();  // waits for the warmup steps
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) last = train_step();
  loss = last.item<float>();  // waits for the timed steps
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  if (!std::isfinite(loss)) throw std::runtime_error("loss is not finite after the timed steps");

  const double step_s = took.count() / o.steps;
  nlohmann::json result = {
      {"impl", std::string("cohort-") + o.optimizer +
                   (o.compute_path == "automatic" ? "" : "-" + o.compute_path)},
      {"compute_path", o.compute_path},
      {"loss_chunk", o.loss_chunk},
      {"grad_clip", o.grad_clip},
      {"config", o.config},
      {"params", net->parameter_count()},
      {"layers", config.num_layers},
      {"hidden", config.hidden_size},
      {"batch", o.batch},
      {"seq", o.seq},
      {"steps", o.steps},
      {"step_ms", step_s * 1e3},
      {"tokens_per_s", static_cast<double>(o.batch * o.seq) / step_s},
      {"peak_mem_gib", peak_gpu_gib(device)},
      {"loss", loss},
      {"torch", TORCH_VERSION},
  };
  std::cout << result.dump() << std::endl;
  if (o.profile > 0) profile_kernels(o.profile, train_step, device.is_cuda());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench_options o;
  po::options_description desc("model_step_bench options");
  desc.add_options()("help", "show this help")(
      "config", po::value(&o.config)->required(), "Hugging Face style config.json of the model")(
      "batch", po::value(&o.batch)->default_value(o.batch), "micro-batch size")(
      "seq", po::value(&o.seq)->default_value(o.seq), "sequence length")(
      "steps", po::value(&o.steps)->default_value(o.steps), "timed steps")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed steps first")(
      "optimizer", po::value(&o.optimizer)->default_value(o.optimizer),
      "cohort (core/model adamw_step per tensor), fused (ATen _fused_adamw_) or kernel (cohort's "
      "AdamW kernel, as the engine on CUDA)")(
      "grad-clip", po::value(&o.grad_clip)->default_value(o.grad_clip),
      "clip the gradients' total norm to this before the update (0: no clipping)")(
      "device", po::value(&o.device)->default_value(o.device), "torch device")(
      "lr", po::value(&o.lr)->default_value(o.lr), "AdamW learning rate")(
      "profile", po::value(&o.profile)->default_value(o.profile),
      "after the timed steps, profile this many steps and print the longest GPU kernels")(
      "compute-path", po::value(&o.compute_path)->default_value(o.compute_path),
      "automatic (fused on CUDA), plain or fused")(
      "loss-chunk", po::value(&o.loss_chunk)->default_value(o.loss_chunk),
      "fused path: positions per chunk of the loss (0: all at once)");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    if (o.batch < 1 || o.seq < 2 || o.steps < 1 || o.warmup < 1) {
      throw std::invalid_argument("--batch and --steps and --warmup must be >= 1, --seq >= 2");
    }
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "model_step_bench: " << e.what() << "\n";
    return 1;
  }
}

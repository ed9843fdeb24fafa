// What the training engines share: compute_device, dtype_of, seed_rank, loader_options_of,
// tokenizer_files, check_checkpoint_vocab, all_reduce_sum, finish_step and engine_state.
#include "core/train/engine_common.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>

#include <torch/cuda.h>
#include <torch/torch.h>

#ifdef COHORT_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "core/model/adamw.hpp"
#include "core/model/torch_compat.hpp"
#include "core/train/engine_checkpoint.hpp"
#include "core/train/lr_schedule.hpp"
#include "core/train/run_control.hpp"
#include "core/train/test_hooks.hpp"
#include "core/train/vocab_plan.hpp"

namespace cohort::core::train {

namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

nlohmann::json tokenizer_files(const std::string& model_dir, const data::manifest& data) {
  nlohmann::json files = nlohmann::json::array();
  std::string dir = model_dir;
  if (dir.empty() && !data.tokenizer_path.empty() && is_file(data.tokenizer_path)) {
    files.push_back(data.tokenizer_path);
    dir = parent_of(data.tokenizer_path);
  }
  if (dir.empty()) return files;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                           "special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json",
                           "chat_template.jinja", "generation_config.json", "spiece.model"}) {
    const std::string path = dir + "/" + name;
    // Once each: the data set's tokenizer file may be one of the directory's (listed above only
    // without model.hf_dir).
    if (is_file(path) && std::find(files.begin(), files.end(), path) == files.end()) files.push_back(path);
  }
  return files;
}

model::hf_files open_model_files(const config::job_spec& spec, int rank) {
  const std::string& location = spec.model.hf_dir;
  if (location.empty()) return {};
  std::string cache;
  if (config::is_s3_url(location)) {
    const auto url = config::parse_s3_url(location, "model.hf_dir");
    cache = (std::filesystem::temp_directory_path() / "cohort-model-cache" / url.bucket / url.prefix /
             ("rank-" + std::to_string(rank)))
                .string();
  }
  return model::open_hf_files(location, spec.run.s3_endpoint, cache);
}

void check_checkpoint_vocab(const std::string& dir, const ckpt::manifest& m, std::int64_t vocab) {
  if (!m.extra.is_object() || !m.extra.contains("model_config") || !m.extra["model_config"].is_object()) return;
  const auto& saved = m.extra["model_config"];
  if (!saved.contains("vocab_size") || !saved["vocab_size"].is_number_integer()) return;
  const auto written = saved["vocab_size"].get<std::int64_t>();
  if (written != vocab)
    throw std::invalid_argument(dir + ": written by a model of vocab_size " + std::to_string(written) +
                                ", this job's model has " + std::to_string(vocab) +
                                " (model.added_tokens and model.pad_vocab_to_multiple_of grow it from "
                                "config.json's); resume with the model section the checkpoint was written with");
}

void seed_rank(const config::train_spec& train, int rank) {
  if (train.deterministic) {
    // cuBLAS reads its workspace setting when its first handle is made, after this.
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    model::compat::use_deterministic_algorithms();
  }
  std::lock_guard<std::mutex> lock(generator_mutex());
  torch::manual_seed(static_cast<std::uint64_t>(train.seed) * 0x9E3779B97F4A7C15ULL +
                     static_cast<std::uint64_t>(rank));
}

data::loader_options loader_options_of(const config::train_spec& train, const comm::process_group& group,
                                       data::batch_kind kind) {
  data::loader_options lo;
  lo.geometry = {group.size(), train.micro_batch_size, train.grad_accum};
  lo.rank = group.rank();
  lo.seed = train.seed;
  lo.kind = kind;
  return lo;
}

torch::Device compute_device(const config::job_spec& spec, int rank) {
  if (!spec.scaling.use_gpu) return torch::kCPU;
  const int index = causal_lm_engine::cuda_device_for(rank);
  if (index < 0)
    throw std::invalid_argument("scaling.use_gpu is true but this worker sees no CUDA device");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

torch::ScalarType dtype_of(config::precision p) {
  return p == config::precision::bf16 ? torch::kBFloat16 : torch::kFloat;
}

zero_options zero_options_of(const config::job_spec& spec, const torch::Device& device) {
  zero_options zo;
  zo.stage = spec.zero.stage;
  zo.offload = spec.zero.offload_optimizer == config::offload_device::cpu;
  zo.offload_param = spec.zero.offload_param == config::offload_device::cpu;
  zo.device = device;
  zo.compute_dtype = dtype_of(spec.train.dtype);
  zo.overlap_host_update = !test_sequential_host_update();
  zo.delayed_update = spec.zero.delayed_param_update && zo.overlap_host_update;
  zo.delay_after = spec.train.warmup_steps;
  zo.weight_grads_in_buffer = !test_weight_grads_through_autograd();
  zo.update_at_next_gather = !test_update_at_step_end();
  return zo;
}

host_read::host_read(const torch::Tensor& t) {
#ifdef COHORT_WITH_CUDA
  if (t.is_cuda()) {
    host_ = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
    host_.copy_(t, /*non_blocking=*/true);
    auto copied = std::make_shared<at::cuda::CUDAEvent>();
    copied->record(c10::cuda::getCurrentCUDAStream(t.device().index()));
    copied_ = std::move(copied);
    return;
  }
#endif
  host_ = t.cpu();
}

torch::Tensor host_read::get() {
#ifdef COHORT_WITH_CUDA
  if (copied_) std::static_pointer_cast<at::cuda::CUDAEvent>(copied_)->synchronize();
#endif
  return host_;
}

void wait_for_device(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

torch::Tensor all_reduce_sum(comm::process_group& group, const torch::Device& device,
                             const std::atomic<bool>* cancelled, std::vector<double> values) {
  auto t = torch::tensor(values, torch::kDouble);
  if (group.size() == 1) return t;  // a rank alone: its own values, and the device never waited for
#ifdef COHORT_WITH_CUDA
  // The copies on a stream of their own, so that the host waits for the collective alone (the
  // group's stream runs it after the collectives issued before it), not for all the compute stream
  // has queued: at a step's start that is the previous step's update, and the host would queue
  // nothing of the step while it ran.
  std::optional<c10::cuda::CUDAStreamGuard> aside;
  if (device.is_cuda()) aside.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
#endif
  t = t.to(device);
  wait_for(group.all_reduce(t, comm::reduce_op::sum), group, cancelled);
  return t.cpu();
}

void add_loss(torch::Tensor& total, const torch::Tensor& sum) {
  auto s = sum.detach().to(torch::kDouble);
  total = total.defined() ? total + s : s;
}

step_result finish_step(zero_optimizer& optimizer, const config::job_spec& spec, comm::process_group& group,
                        const torch::Device& device, const std::atomic<bool>* cancelled, std::int64_t step_index,
                        std::int64_t total_steps, const torch::Tensor& local_loss, const torch::Tensor& counts,
                        std::vector<std::int64_t> samples, std::chrono::steady_clock::time_point started) {
  const auto& train = spec.train;
  const double global_labels = std::max(1.0, counts[0].item<double>());
  // The loss and the squares stay where they were computed (on a GPU: nothing read on the host
  // before the update is queued). Several ranks add theirs in one all-reduce; stage 0's squares
  // are of the whole gradient, the same on every rank, and are not added.
  const auto fp64 = torch::TensorOptions().dtype(torch::kDouble).device(device);
  auto loss = local_loss.defined() ? local_loss.to(fp64) : torch::zeros({}, fp64);
  auto squares = optimizer.grad_square_sum().to(fp64);
  if (group.size() > 1) {
    auto both = torch::stack({loss, spec.zero.stage == 0 ? torch::zeros({}, fp64) : squares});
    wait_for(group.all_reduce(both, comm::reduce_op::sum), group, cancelled);
    loss = both[0];
    if (spec.zero.stage != 0) squares = both[1];
  }
  const auto coef = train.grad_clip > 0 ? model::clip_coefficient(squares, train.grad_clip) : torch::Tensor();

  model::adamw_options ao;
  ao.lr = learning_rate(train, step_index, total_steps);
  ao.beta1 = train.beta1;
  ao.beta2 = train.beta2;
  ao.eps = train.eps;
  ao.weight_decay = train.weight_decay;
  const auto update_started = std::chrono::steady_clock::now();
  host_read pending(torch::stack({loss, squares}));
  optimizer.step(ao, coef);
  // The step's one host read of the device: it waits for the figures, not for the update queued
  // after them, which runs while the host goes through the run loop to the next step.
  const auto figures = pending.get();

  step_result r;
  r.step = step_index + 1;
  r.loss = figures[0].item<double>() / global_labels;
  r.lr = ao.lr;
  r.grad_norm = std::sqrt(figures[1].item<double>());
  r.tokens = static_cast<std::int64_t>(counts[1].item<double>());
  r.checkpoint_requested = counts[2].item<double>() > 0;
  r.preempted = counts[3].item<double>() > 0;
  r.samples = std::move(samples);
  const auto now = std::chrono::steady_clock::now();
  r.seconds = std::chrono::duration<double>(now - started).count();
  r.optimizer_seconds = std::chrono::duration<double>(now - update_started).count();
  r.host_update_seconds = optimizer.overlapped_update_seconds();
  return r;
}

engine_state::engine_state(const config::job_spec& s, comm::process_group& g, const std::atomic<bool>* c)
    : spec(s),
      group(g),
      model_files(open_model_files(s, g.rank())),
      cancelled(c),
      device(compute_device(s, g.rank())) {}

std::int64_t engine_state::global_batch() const {
  return std::int64_t{spec.train.micro_batch_size} * spec.train.grad_accum * group.size();
}

nlohmann::json engine_state::checkpoint_extra(nlohmann::json model_config) const {
  nlohmann::json extra = {{"model_config", std::move(model_config)},
                          {"tokenizer_files", tokenizer_files(model_files.dir, data->info())},
                          {"job_name", spec.name},
                          {"global_batch", global_batch()},
                          {"zero_stage", spec.zero.stage}};
  auto added = added_tokens_json(data->info());
  if (!added.empty()) extra["added_tokens"] = std::move(added);
  return extra;
}

void engine_state::request_checkpoint(bool preempted) {
  checkpoint_requested = true;
  preempt_requested = preempt_requested || preempted;
}

checkpoint_part engine_state::checkpoint() {
  checkpoint_part part;
  part.tensors = shard_tensors(*optimizer, group.rank());
  // The sampler's position is the step after the last one done (the loader may stand a step
  // further, its next step's batches read ahead).
  part.state = rank_state_of(*optimizer,
                             {steps_done, total_steps, steps_done, spec.train.seed, global_batch()}, device);
  // Before any thread reads the state: the last update (finish_step does not wait for it), and
  // what reading the state queued (an update the optimizer left to a gather, see
  // zero_options::update_at_next_gather).
  wait_for_device(device);
  return part;
}

std::vector<float> engine_state::full_weights() {
  auto w = optimizer->full_weights().contiguous();
  return std::vector<float>(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
}

void engine_state::restore(const std::string& dir, const ckpt::manifest& m) {
  steps_done = restore_engine_state(dir, m, *optimizer, group.rank(), group.size(), global_batch(), device);
  loader->seek(steps_done);
}

}  // namespace cohort::core::train

// shard_tensors / load_shards: the unit shards' element ranges mapped onto parameter slices; an
// engine's rank state saved and restored.
#include "core/train/engine_checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "core/ckpt/base64.hpp"
#include "core/ckpt/hf_export.hpp"
#include "core/ckpt/reader.hpp"

namespace cohort::core::train {

namespace {

// Logical-name prefixes of the three kinds, and the stored tensors' suffixes.
const std::string prefixes[] = {ckpt::param_tensor_prefix, "exp_avg/", "exp_avg_sq/"};
const char* const stored[] = {"param", "exp_avg", "exp_avg_sq"};

torch::Tensor& state_of(zero_optimizer& optimizer, std::size_t u, int kind) {
  auto& adam = optimizer.adam(u);
  return kind == 0 ? optimizer.master(u) : kind == 1 ? adam.exp_avg : adam.exp_avg_sq;
}

// Where the kept range [begin, begin + length) of a unit meets one parameter.
struct overlap {
  std::int64_t in_param = 0;  // first element, counted within the parameter
  std::int64_t in_range = 0;  // the same element, counted within the kept range
  std::int64_t length = 0;
};

std::vector<std::pair<zero_optimizer::parameter_place, overlap>> overlaps(const zero_optimizer& optimizer,
                                                                          std::size_t u) {
  const auto [begin, length] = optimizer.kept_range(u);
  std::vector<std::pair<zero_optimizer::parameter_place, overlap>> out;
  for (auto& p : optimizer.parameters_of(u)) {
    const std::int64_t lo = std::max(begin, p.offset);
    const std::int64_t hi = std::min(begin + length, p.offset + p.numel);
    if (lo < hi) out.push_back({p, {lo - p.offset, lo - begin, hi - lo}});
  }
  return out;
}

}  // namespace

std::vector<ckpt::shard_tensor> shard_tensors(zero_optimizer& optimizer, int rank) {
  std::vector<ckpt::shard_tensor> out;
  if (optimizer.replicated() && rank != 0) return out;
  for (std::size_t u = 0; u < optimizer.unit_count(); ++u) {
    const std::int64_t length = optimizer.kept_range(u).second;
    if (length == 0) continue;
    const auto pieces = overlaps(optimizer, u);
    for (int k = 0; k < 3; ++k) {
      ckpt::shard_tensor t;
      t.key = "unit-" + std::to_string(u) + "/" + stored[k];
      t.dtype = "F32";
      t.shape = {length};
      t.nbytes = static_cast<std::size_t>(length) * sizeof(float);
      const auto& value = state_of(optimizer, u, k);
      if (value.defined() && value.device().is_cpu() && value.is_contiguous()) {
        t.data = value.data_ptr<float>();  // host state (CPU jobs, offload): written where it lies
      } else {
        t.read = [value](std::uint64_t offset, void* into, std::size_t n) {
          const auto first = static_cast<std::int64_t>(offset / sizeof(float));
          const auto count = static_cast<std::int64_t>(n / sizeof(float));
          auto host = torch::from_blob(into, {count}, torch::kFloat);
          if (value.defined()) {
            host.copy_(value.narrow(0, first, count));
          } else {
            host.zero_();  // moments before the first step
          }
        };
      }
      for (const auto& [p, o] : pieces) {
        t.slices.push_back({prefixes[k] + p.name, p.shape,
                            static_cast<std::uint64_t>(o.in_param), static_cast<std::uint64_t>(o.length),
                            static_cast<std::uint64_t>(o.in_range)});
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

void load_shards(zero_optimizer& optimizer, ckpt::reshard_reader& reader) {
  const auto& m = reader.layout();
  const std::string where = "checkpoint step " + std::to_string(m.step);
  for (std::size_t u = 0; u < optimizer.unit_count(); ++u) {
    for (const auto& p : optimizer.parameters_of(u)) {
      const auto* t = m.find(prefixes[0] + p.name);
      if (t == nullptr)
        throw std::invalid_argument(where + " has no weights for parameter " + p.name +
                                    ": it was written for another model");
      if (t->shape != p.shape || t->dtype != "F32")
        throw std::invalid_argument(where + " holds parameter " + p.name +
                                    " with another shape or dtype than this job's model");
    }
  }
  torch::NoGradGuard no_grad;
  for (std::size_t u = 0; u < optimizer.unit_count(); ++u) {
    const std::int64_t length = optimizer.kept_range(u).second;
    if (length == 0) continue;
    const auto pieces = overlaps(optimizer, u);
    auto host = torch::zeros({length}, torch::kFloat);
    for (int k = 0; k < 3; ++k) {
      auto& value = state_of(optimizer, u, k);
      if (!value.defined()) value = torch::zeros_like(optimizer.master(u));
      const bool present = m.find(prefixes[k] + pieces.front().first.name) != nullptr;
      host.zero_();
      for (const auto& [p, o] : pieces) {
        if (!present) break;
        reader.read(prefixes[k] + p.name, static_cast<std::uint64_t>(o.in_param),
                    static_cast<std::uint64_t>(o.length), host.data_ptr<float>() + o.in_range);
      }
      value.narrow(0, 0, length).copy_(host);
    }
  }
}

std::mutex& generator_mutex() {
  static std::mutex m;
  return m;
}

ckpt::rank_state rank_state_of(zero_optimizer& optimizer, const engine_position& at, const torch::Device& device) {
  ckpt::rank_state state;
  state.step = static_cast<std::uint64_t>(at.steps_done);
  state.scheduler = {{"step", at.steps_done}, {"total_steps", at.total_steps}};
  state.sampler = {{"step", at.sampler_step}, {"seed", at.seed}, {"global_batch", at.global_batch}};
  auto cpu_rng = at::globalContext().defaultGenerator(torch::kCPU).get_state().contiguous();
  state.rng.assign(static_cast<const char*>(cpu_rng.data_ptr()), static_cast<std::size_t>(cpu_rng.nbytes()));
  state.extra = {{"adam_step", optimizer.adam(0).step}};
  if (device.is_cuda()) {
    auto gpu_rng = at::globalContext().defaultGenerator(device).get_state().contiguous();
    state.extra["cuda_rng"] = ckpt::base64_encode(
        std::string(static_cast<const char*>(gpu_rng.data_ptr()), static_cast<std::size_t>(gpu_rng.nbytes())));
  }
  return state;
}

namespace {

torch::Tensor byte_tensor(const std::string& bytes) {
  auto t = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

std::int64_t restore_engine_state(const std::string& dir, const ckpt::manifest& m, zero_optimizer& optimizer,
                                  int rank, int world_size, std::int64_t global_batch, const torch::Device& device) {
  const std::string where = dir + ": ";
  if (m.extra.contains("global_batch") && m.extra["global_batch"] != global_batch)
    throw std::invalid_argument(
        where + "written with a global batch of " + m.extra["global_batch"].dump() +
        " samples, this job has " + std::to_string(global_batch) +
        " (train.micro_batch_size x train.grad_accum x scaling.num_workers); keep it equal to resume");
  ckpt::reshard_reader reader(dir, m);
  load_shards(optimizer, reader);
  const auto state = ckpt::load_rank_shard(dir, m, rank % m.world_size).state();
  const auto sampler_step = state.sampler.value("step", std::int64_t{-1});
  if (sampler_step != static_cast<std::int64_t>(state.step))
    throw std::invalid_argument(where + "rank state's sampler position " + std::to_string(sampler_step) +
                                " does not match its step " + std::to_string(state.step));
  const auto adam_step = state.extra.value("adam_step", std::int64_t{0});
  for (std::size_t u = 0; u < optimizer.unit_count(); ++u) optimizer.adam(u).step = adam_step;
  if (m.world_size == world_size) {  // another world size draws other numbers anyway (each rank its own data)
    std::lock_guard<std::mutex> lock(generator_mutex());
    auto cpu = at::globalContext().defaultGenerator(torch::kCPU);  // a handle: set_state reaches torch's
    if (!state.rng.empty()) cpu.set_state(byte_tensor(state.rng));
    if (device.is_cuda() && state.extra.contains("cuda_rng")) {
      auto gpu = at::globalContext().defaultGenerator(device);
      gpu.set_state(byte_tensor(ckpt::base64_decode(state.extra["cuda_rng"].get<std::string>(), where + "cuda_rng")));
    }
  }
  optimizer.refresh_weights();
  return sampler_step;
}

}  // namespace cohort::core::train

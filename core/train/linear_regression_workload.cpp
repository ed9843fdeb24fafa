// Data-parallel linear regression (see linear_regression_workload.hpp). The data set is made
// from the job's seed: every rank builds the same samples and takes its slice of each step.
#include "core/train/linear_regression_workload.hpp"

#include <chrono>
#include <cmath>
#include <vector>

#include <torch/torch.h>

#include "core/comm/process_group.hpp"
#include "core/train/memory_status.hpp"
#include "core/train/metrics_log.hpp"
#include "core/train/run_control.hpp"
#include "core/train/step_gate.hpp"

namespace cohort::core::train {

namespace {

constexpr int features = 8;
constexpr std::int64_t dataset_samples = 4096;

// splitmix64: a tiny deterministic generator, identical on every rank and platform.
struct splitmix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

struct dataset {
  torch::Tensor x;  // (N, features)
  torch::Tensor y;  // (N, 1)
};

dataset make_dataset(std::uint64_t seed) {
  splitmix64 rng{seed * 7919 + 17};
  std::vector<float> w(features);
  for (auto& v : w) v = static_cast<float>(rng.normal());
  std::vector<float> xs(dataset_samples * features), ys(dataset_samples);
  for (std::int64_t i = 0; i < dataset_samples; ++i) {
    double dot = 0.5;  // the true bias
    for (int j = 0; j < features; ++j) {
      xs[i * features + j] = static_cast<float>(rng.normal());
      dot += xs[i * features + j] * w[j];
    }
    ys[i] = static_cast<float>(dot + 0.01 * rng.normal());
  }
  return {torch::from_blob(xs.data(), {dataset_samples, features}).clone(),
          torch::from_blob(ys.data(), {dataset_samples, 1}).clone()};
}

}  // namespace

void linear_regression_workload::run(const worker_context& ctx) {
  const auto& train = ctx.spec.train;
  const std::int64_t global = config::global_batch(ctx.spec);
  if (global > dataset_samples)
    throw std::invalid_argument("linear_regression: global batch " + std::to_string(global) +
                                " exceeds the data set of " + std::to_string(dataset_samples) +
                                " samples");
  const std::int64_t per_rank = global / ctx.world_size;
  const std::int64_t steps_per_epoch = dataset_samples / global;
  const std::int64_t total_steps = train.as_test ? 1  // train.as_test: one step
                                   : train.max_steps > 0 ? train.max_steps : steps_per_epoch * train.epochs;

  auto group = join_group(ctx, comm::backend_kind::gloo);

  auto data = make_dataset(train.seed);
  torch::NoGradGuard outer_no_grad;
  auto weight = torch::zeros({features, 1});
  auto bias = torch::zeros({1});
  std::unique_ptr<metrics_log> metrics;
  if (ctx.rank == 0) metrics = std::make_unique<metrics_log>(ctx.run_dir + "/metrics.jsonl");
  std::unique_ptr<memory_status_log> memory;  // on the CPU: host RSS only
  if (ctx.spec.run.memory_status_every_s > 0)
    memory = std::make_unique<memory_status_log>(ctx.run_dir, ctx.rank, -1, ctx.spec.run.memory_status_every_s, 0);
  if (ctx.log)
    ctx.log("rank " + std::to_string(ctx.rank) + "/" + std::to_string(ctx.world_size) +
            " on node " + ctx.node + ": fitting " + std::to_string(features) +
            " features, " + std::to_string(total_steps) + " steps of " + std::to_string(global) +
            " samples");

  double loss_value = 0;
  step_gate gate(ctx);
  step_report last{0, total_steps};
  for (std::int64_t step = 0; step < total_steps; ++step) {
    check_cancelled(ctx.cancelled);
    gate.pass(step + 1, last);
    auto started = std::chrono::steady_clock::now();
    const std::int64_t first = (step % steps_per_epoch) * global + ctx.rank * per_rank;
    auto x = data.x.narrow(0, first, per_rank);
    auto y = data.y.narrow(0, first, per_rank);
    // Gradients of the mean squared error over the whole global batch: each rank sums its part,
    // the all-reduce adds the parts, and dividing by the global batch gives the mean.
    auto residual = torch::matmul(x, weight) + bias - y;               // (b, 1)
    auto packed = torch::cat({(2.0 * torch::matmul(x.t(), residual)).flatten(),
                              (2.0 * residual.sum()).reshape({1}),
                              residual.pow(2).sum().reshape({1})});
    wait_for(group->all_reduce(packed, comm::reduce_op::sum), *group, ctx.cancelled);
    packed /= static_cast<double>(global);
    auto grad_w = packed.narrow(0, 0, features).reshape({features, 1});
    auto grad_b = packed.narrow(0, features, 1);
    loss_value = packed[features + 1].item<double>();
    double grad_norm = std::sqrt(grad_w.pow(2).sum().item<double>() +
                                 grad_b.pow(2).sum().item<double>());
    weight -= train.lr * grad_w;
    bias -= train.lr * grad_b;

    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    step_report report{step + 1, total_steps, loss_value, train.lr, grad_norm,
                       seconds > 0 ? per_rank * ctx.world_size / seconds : 0, 0};
    if ((step + 1) % train.log_every == 0 || step + 1 == total_steps) {
      if (metrics) metrics->append(report);
      if (memory) memory->at_step(step + 1);
      if (ctx.report) ctx.report(report);
    }
    last = report;
    if (ctx.step_reached) ctx.step_reached->store(step + 1);
    pause_between_steps(ctx);
  }
  if (ctx.log)
    ctx.log("rank " + std::to_string(ctx.rank) + " done: final loss " + std::to_string(loss_value));
}

}  // namespace cohort::core::train

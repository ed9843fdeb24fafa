// causal_lm_workload::run: group, engine, the step loop, metrics and reports.
#include "core/train/causal_lm_workload.hpp"

#include <memory>
#include <string>

#include "core/train/causal_lm_engine.hpp"
#include "core/train/metrics_log.hpp"
#include "core/train/mfu.hpp"
#include "core/train/run_control.hpp"

namespace cohort::core::train {

void causal_lm_workload::run(const worker_context& ctx) {
  config::check_runnable(ctx.spec);
  const bool gpu = ctx.spec.scaling.use_gpu;
  auto group = gpu ? join_group(ctx, comm::backend_kind::nccl,
                               causal_lm_engine::cuda_device_for(ctx.rank))
                   : join_group(ctx, comm::backend_kind::gloo);
  causal_lm_engine engine(ctx.spec, *group, ctx.cancelled);
  std::unique_ptr<metrics_log> metrics;
  if (ctx.rank == 0) metrics = std::make_unique<metrics_log>(ctx.run_dir + "/metrics.jsonl");
  if (ctx.log)
    ctx.log("rank " + std::to_string(ctx.rank) + "/" + std::to_string(ctx.world_size) + " on node " +
            ctx.node + ": causal_lm, " + std::to_string(engine.parameter_count()) + " parameters, " +
            std::to_string(engine.total_steps()) + " steps of " +
            std::to_string(engine.global_batch()) + " samples, ZeRO stage " +
            std::to_string(ctx.spec.zero.stage));

  const std::int64_t total = engine.total_steps();
  step_result last;
  while (engine.steps_done() < total) {
    last = engine.train_step();
    if (last.step % ctx.spec.train.log_every == 0 || last.step == total) {
      const double tokens_per_s = last.seconds > 0 ? static_cast<double>(last.tokens) / last.seconds : 0;
      step_report report{last.step, total, last.loss, last.lr, last.grad_norm, tokens_per_s,
                         mfu(tokens_per_s, engine.flops_per_token(), engine.peak_flops(), ctx.world_size)};
      if (metrics) metrics->append(report);
      if (ctx.report) ctx.report(report);
    }
    pause_between_steps(ctx);
  }
  if (ctx.log)
    ctx.log("rank " + std::to_string(ctx.rank) + " done: final loss " + std::to_string(last.loss));
}

}  // namespace cohort::core::train

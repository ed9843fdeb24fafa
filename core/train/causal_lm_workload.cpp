// causal_lm_workload::run: group, engine, resume, the step loop, checkpoints, metrics and reports.
#include "core/train/causal_lm_workload.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "core/ckpt/hf_export.hpp"
#include "core/ckpt/layout.hpp"
#include "core/comm/comm_error.hpp"
#include "core/data/format.hpp"
#include "core/model/gemm.hpp"
#include "core/model/model_error.hpp"
#include "core/train/causal_lm_engine.hpp"
#include "core/train/checkpointer.hpp"
#include "core/train/device_memory.hpp"
#include "core/train/emergency_save.hpp"
#include "core/train/event_file.hpp"
#include "core/train/job_preflight.hpp"
#include "core/train/memory_status.hpp"
#include "core/train/metrics_log.hpp"
#include "core/train/mfu.hpp"
#include "core/train/run_control.hpp"
#include "core/train/sample_log.hpp"
#include "core/train/seq2seq_engine.hpp"
#include "core/train/step_gate.hpp"
#include "core/train/step_profiler.hpp"
#include "core/train/test_hooks.hpp"
#include "core/train/training_engine.hpp"

namespace cohort::core::train {

namespace {

// The step's figures a checkpoint's manifest records (config::score_attributes names them).
nlohmann::json metrics_of(const step_report& r) {
  nlohmann::json m{{"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm}, {"tokens_per_s", r.tokens_per_s}};
  if (r.mfu > 0) m["mfu"] = r.mfu;
  if (r.evaluated) {
    m["eval_loss"] = r.eval_loss;
    if (!r.eval_reward) m["eval_perplexity"] = r.eval_perplexity;
  }
  add_reward_metrics(m, r);
  return m;
}

// The scalars TensorBoard shows for a logged step: those of metrics.jsonl, and rank 0's memory
// peaks.
std::vector<scalar> scalars_of(const step_report& r, int device) {
  std::vector<scalar> s{{"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm}, {"tokens_per_s", r.tokens_per_s}};
  if (r.mfu > 0) s.emplace_back("mfu", r.mfu);
  if (r.evaluated) {
    s.emplace_back("eval_loss", r.eval_loss);
    if (!r.eval_reward) s.emplace_back("eval_perplexity", r.eval_perplexity);
  }
  nlohmann::json reward = nlohmann::json::object();
  add_reward_metrics(reward, r);
  for (const auto& [name, value] : reward.items()) s.emplace_back(name, value.get<double>());
  const auto peaks = read_memory_peaks(device);
  if (peaks.host_rss > 0) s.emplace_back("memory/host_peak_rss_bytes", static_cast<double>(peaks.host_rss));
  if (device >= 0) {
    s.emplace_back("memory/gpu_peak_allocated_bytes", static_cast<double>(peaks.gpu_allocated));
    s.emplace_back("memory/gpu_peak_reserved_bytes", static_cast<double>(peaks.gpu_reserved));
  }
  return s;
}

// What write_hf wrote.
struct hf_written {
  ckpt::hf_export_stats stats;
  std::uint64_t adapter_tensors = 0;  // 0: not a LoRA checkpoint
};

// The committed checkpoint in `source` as a Hugging Face directory `out` (LoRA: the base with the
// adapters merged in) and, for LoRA, the adapters in peft's layout in `adapter`. The bytes written
// go to `activity` (when given) as the export's progress, on top of what it counts already
// (count_after).
hf_written write_hf(const std::string& source, const std::string& out, const std::string& adapter,
                    rank_activity* activity) {
  ckpt::hf_export_options options;
  // This rank committed the checkpoint, each file digested as it was written (and a download from
  // S3 is verified before): reading it all again first would only cost time.
  options.verify = false;
  options.progress = count_after(activity);
  hf_written out_stats;
  out_stats.stats = ckpt::export_hf(source, out, options);
  if (ckpt::is_lora_checkpoint(source)) out_stats.adapter_tensors = ckpt::export_peft(source, adapter).tensors;
  return out_stats;
}

// Rank 0, at the end: the final checkpoint as a Hugging Face directory in <run>/model (LoRA: the
// base with the adapters merged in) and, for LoRA, the adapters in peft's layout in <run>/adapter.
// With the run in S3 the checkpoint is downloaded (and verified) first and the exports uploaded to
// <remote run>/model/ (and adapter/) after. The activity counts the bytes of all three, so that a
// long download or upload is progress to the hang detector as the write is.
void export_final_model(const worker_context& ctx, std::int64_t final_step) {
  if (final_step <= 0) return;
  const auto step = static_cast<std::uint64_t>(final_step);
  const std::string out = ctx.run_dir + "/model";
  const std::string adapter = ctx.run_dir + "/adapter";
  const std::string cache = ctx.run_dir + "/s3-cache/export";  // a checkpoint in S3, downloaded
  const auto checkpoints = open_checkpoints(ctx, cache);
  if (ctx.activity) ctx.activity->start_write(final_step, 0);
  const std::string source = checkpoints->fetch(step, std::nullopt, count_after(ctx.activity));
  test_pause_point("export-" + ckpt::step_dir_name(step), ctx.cancelled);
  const auto written = write_hf(source, out, adapter, ctx.activity);
  const bool lora = written.adapter_tensors > 0;
  const std::string where = checkpoints->publish_export(out, "model", count_after(ctx.activity));
  const std::string adapter_where =
      lora ? checkpoints->publish_export(adapter, "adapter", count_after(ctx.activity)) : "";
  std::filesystem::remove_all(cache);
  if (!ctx.log) return;
  for (const auto& w : written.stats.warnings) ctx.log("export: " + w);
  ctx.log("model of step " + std::to_string(final_step) + " exported to " + where + " (" +
          std::to_string(written.stats.tensors) + " tensors, " + std::to_string(written.stats.weight_bytes >> 10) +
          " KiB)");
  if (lora)
    ctx.log("LoRA adapters of step " + std::to_string(final_step) + " exported to " + adapter_where + " (" +
            std::to_string(written.adapter_tensors) + " tensors, peft's layout)");
}

// run.checkpoint.num_exports_to_keep: the newest exports in `root` stay; older ones, and what an
// interrupted export left (step-N.partial), go. Returns how many exports it removed.
std::size_t prune_exports(const std::string& root, int keep) {
  std::vector<std::pair<std::uint64_t, std::filesystem::path>> exports;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const auto name = entry.path().filename().string();
    if (name.size() > 8 && name.compare(name.size() - 8, 8, ".partial") == 0) {
      std::filesystem::remove_all(entry.path(), ec);
    } else if (const auto step = ckpt::parse_step_dir_name(name)) {
      exports.emplace_back(*step, entry.path());
    }
  }
  if (keep <= 0 || exports.size() <= static_cast<std::size_t>(keep)) return 0;
  std::sort(exports.begin(), exports.end());
  const std::size_t removed = exports.size() - static_cast<std::size_t>(keep);
  for (std::size_t i = 0; i < removed; ++i) std::filesystem::remove_all(exports[i].second);
  return removed;
}

// run.checkpoint.export_every: rank 0 writes the committed checkpoint of every such step but the
// final one (export_final_model writes that to <run>/model) as <run>/exports/step-N (LoRA: its
// adapters in step-N/adapter too) with a trainer_state.json of the step's metrics, written beside
// as step-N.partial and renamed whole, and keeps the newest num_exports_to_keep. A rank that waits
// for the save (a synchronous one) reports the export's bytes.
void export_every(const worker_context& ctx, checkpointer& checkpoints, std::int64_t final_step) {
  checkpoints.on_commit([&ctx, final_step](std::uint64_t step, const std::string& dir,
                                           const nlohmann::json& metrics) -> std::string {
    const auto& c = ctx.spec.run.checkpoint;
    if (static_cast<std::int64_t>(step) == final_step || step % static_cast<std::uint64_t>(c.export_every) != 0)
      return "";
    const std::string root = ctx.run_dir + "/exports";
    const std::string out = root + "/" + ckpt::step_dir_name(step), partial = out + ".partial";
    std::filesystem::remove_all(partial);
    const bool waited_for = ctx.activity != nullptr && ctx.activity->read().phase == rank_phase::exporting;
    if (waited_for) ctx.activity->start_write(static_cast<std::int64_t>(step), 0);
    const auto written = write_hf(dir, partial, partial + "/adapter", waited_for ? ctx.activity : nullptr);
    auto logged = metrics;
    logged["step"] = step;
    ckpt::write_file_durable(partial + "/trainer_state.json",
                             nlohmann::json{{"global_step", step}, {"log_history", {logged}}}.dump(2) + "\n");
    std::filesystem::remove_all(out);
    std::filesystem::rename(partial, out);
    const std::size_t removed = prune_exports(root, c.num_exports_to_keep);
    return "checkpoint of step " + std::to_string(step) + " exported to " + out + " (" +
           std::to_string(written.stats.tensors) + " tensors" +
           (written.adapter_tensors > 0 ? ", LoRA adapters in adapter/" : "") + ")" +
           (removed > 0 ? "; " + std::to_string(removed) + " older exports removed" : "");
  });
}

// Runs one step of the rank's setup; the job's own input failing there (the spec, the data set,
// the model config) becomes bad_input_error, while collective errors and cancellation pass as
// they are (a restart may fix those).
template <class F>
auto input_checked(F&& setup) -> decltype(setup()) {
  try {
    return setup();
  } catch (const cancelled_error&) {
    throw;
  } catch (const comm::comm_error&) {
    throw;
  } catch (const config::spec_error& e) {
    throw bad_input_error(e.what());
  } catch (const data::data_error& e) {
    throw bad_input_error(std::string("data.train: ") + e.what());
  } catch (const model::model_error& e) {
    throw bad_input_error(std::string("model: ") + e.what());
  } catch (const std::invalid_argument& e) {
    throw bad_input_error(e.what());
  }
}

// Bytes this process has read from files and sockets so far (/proc/self/io's rchar); 0 where the
// kernel does not say.
std::uint64_t process_read_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return 0;
}

// "loading took 12.3 s and read 6.74 GB; host RSS 1.2 GiB now, ": what a rank's start cost (the
// initial weights, from a Hugging Face directory each rank reads only its slices of, and a
// checkpoint when resuming).
std::string describe_loading(double seconds, std::uint64_t bytes_read, int device) {
  char text[96];
  std::snprintf(text, sizeof text, "loading took %.1f s and read %.2f GB; host RSS %.1f GiB now, ", seconds,
                static_cast<double>(bytes_read) / 1e9,
                static_cast<double>(read_memory_now(device).host_rss) / (1024.0 * 1024 * 1024));
  return text;
}

// The engine of this job on this rank: seq2seq_engine for a T5, else causal_lm_engine.
std::unique_ptr<training_engine> open_engine(const worker_context& ctx, comm::process_group& group, bool t5) {
  return input_checked([&]() -> std::unique_ptr<training_engine> {
    if (t5) return std::make_unique<seq2seq_engine>(ctx.spec, group, ctx.cancelled, /*data_verified=*/true);
    return std::make_unique<causal_lm_engine>(ctx.spec, group, ctx.cancelled, /*data_verified=*/true);
  });
}

// One rank's run, as a script: start (join the group, build the engine, resume, open the logs,
// say what runs), then each step — pass the gate, take a checkpoint request, train, evaluate,
// report, save, stop if preempted — and the end (the final checkpoint, the export, the last
// report). The engine is any training_engine.
class rank_run {
 public:
  rank_run(const worker_context& ctx, bool t5)
      : ctx_(ctx),
        device_(ctx.spec.scaling.use_gpu ? causal_lm_engine::cuda_device_for(ctx.rank) : -1),
        gpu_cap_(device_ >= 0 ? apply_gpu_memory_limit(device_) : 0),
        group_(ctx.spec.scaling.use_gpu ? join_group(ctx, comm::backend_kind::nccl, device_)
                                        : join_group(ctx, comm::backend_kind::gloo)),
        gate_(ctx) {
    const auto load_start = std::chrono::steady_clock::now();
    const std::uint64_t read_before = process_read_bytes();
    engine_ = open_engine(ctx, *group_, t5);
    checkpoints_ = std::make_unique<checkpointer>(ctx);
    from_ = checkpoints_->choose_resume();
    if (from_) engine_->restore(from_->dir, from_->manifest);
    const std::string loading =
        describe_loading(std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count(),
                         process_read_bytes() - read_before, device_);
    open_logs();
    log_start(t5 ? "T5 (seq2seq)" : config::to_string(ctx.spec.workload), loading);
    plan_steps();
  }

  void run() {
    while (engine_->steps_done() < total_) {
      gate_.pass(engine_->steps_done() + 1, report_);
      take_checkpoint_request();
      if (profiler_) log_if_any(profiler_->before_step(engine_->steps_done() + 1));
      const step_result last = train_step();
      evaluate_if_due(last);
      report_step(last);
      save_if_due(last);
      stop_if_preempted(last);
      after_step(last);
      if (profiler_) log_if_any(profiler_->after_step(last.step));
    }
    finish();
  }

 private:
  void log(const std::string& line) const {
    if (ctx_.log) ctx_.log(line);
  }
  void log_if_any(const std::string& line) const {
    if (!line.empty()) log(line);
  }

  // metrics.jsonl and the TensorBoard events (rank 0), the memory status and sample logs, the
  // profiler of run.profile_steps.
  void open_logs() {
    if (ctx_.rank == 0) {
      metrics_ = std::make_unique<metrics_log>(ctx_.run_dir + "/metrics.jsonl", engine_->steps_done());
      // A new file per attempt: TensorBoard merges them.
      events_ = std::make_unique<event_file_writer>(ctx_.run_dir + "/tensorboard",
                                                    "attempt-" + std::to_string(ctx_.attempt));
    }
    if (ctx_.spec.run.memory_status_every_s > 0)
      memory_ = std::make_unique<memory_status_log>(
          ctx_.run_dir, ctx_.rank, device_, ctx_.spec.run.memory_status_every_s, engine_->steps_done());
    if (ctx_.spec.run.sample_log)
      samples_ = std::make_unique<sample_log>(ctx_.run_dir, ctx_.rank, ctx_.attempt);
    if (!ctx_.spec.run.profile_steps.empty())
      profiler_ =
          std::make_unique<step_profiler>(ctx_.spec.run.profile_steps, ctx_.run_dir, ctx_.rank, device_ >= 0);
  }

  // The rank's start line: what it trains, how, and what loading cost.
  void log_start(const char* kind, const std::string& loading) const {
    const auto& e = *engine_;
    log("rank " + std::to_string(ctx_.rank) + "/" + std::to_string(ctx_.world_size) + " on node " +
        ctx_.node + ": " + kind + ", " + std::to_string(e.parameter_count()) +
        (ctx_.spec.model.lora.enabled ? " trained parameters (LoRA adapters; the base is frozen), "
                                      : " parameters, ") +
        std::to_string(e.total_steps()) + " steps of " + std::to_string(e.global_batch()) +
        (ctx_.spec.workload == config::workload_kind::reward_model ? " pairs" : " samples") +
        ", ZeRO stage " + std::to_string(ctx_.spec.zero.stage) + ", " +
        std::to_string(at::get_num_threads()) + " host threads" +
        (e.steps_done() > 0 ? ", resuming after step " + std::to_string(e.steps_done()) : "") +
        (gpu_cap_ > 0 ? ", GPU memory capped at " + std::to_string(gpu_cap_ >> 20) + " MiB" : "") + "; " +
        loading + "after loading: " + describe(read_memory_peaks(device_)));
  }

  // The steps this attempt runs (train.as_test: one past where the run stands), the export hook,
  // and the report a resumed run starts from (what the checkpoint's step logged: reported even
  // when no step is left to run).
  void plan_steps() {
    extra_ = engine_->checkpoint_extra();
    first_step_ = engine_->steps_done();
    total_ =
        ctx_.spec.train.as_test ? std::min(engine_->total_steps(), first_step_ + 1) : engine_->total_steps();
    eval_every_ = engine_->has_eval() ? ctx_.spec.train.eval_every : 0;
    if (ctx_.spec.train.as_test && ctx_.rank == 0)
      log("train.as_test: running step " + std::to_string(total_) +
          " only, then the final checkpoint and export");
    if (ctx_.rank == 0 && ctx_.spec.run.checkpoint.export_every > 0)
      export_every(ctx_, *checkpoints_, total_);
    if (from_) {
      const auto& logged = from_->manifest.metrics;
      report_.step = engine_->steps_done();
      report_.loss = logged.value("loss", 0.0);
      report_.lr = logged.value("lr", 0.0);
      report_.grad_norm = logged.value("grad_norm", 0.0);
      report_.checkpoint_step = checkpoints_->committed_step();  // older than a replica step restored
    }
    report_.total_steps = total_;
  }

  // Rank 0: a checkpoint asked for (a request made while held is seen before the step). A
  // preemption's emergency checkpoint is saved only when it can commit before the deadline
  // (emergency_save.hpp); else rank 0 says so with the numbers and waits to be stopped.
  void take_checkpoint_request() {
    if (!checkpoints_->take_request()) return;
    const bool preempted = checkpoints_->preempted();
    if (preempted && !resizing()) {
      const auto plan = plan_emergency_save(
          checkpoints_->last_save(), report_.step_seconds, ctx_.signals->preempt_deadline_ms.load(),
          static_cast<std::int64_t>(unix_seconds_now() * 1000), checkpoints_->committed_step());
      if (!plan.why.empty()) log("preempted: " + plan.why);
      if (!plan.save) decline_emergency_save(plan.why);
    }
    log(std::string(preempted && resizing() ? "resize: " : "") + "checkpoint requested: saving after step " +
        std::to_string(engine_->steps_done() + 1) +
        (!preempted   ? ""
         : resizing() ? " (the job restarts on another number of workers: no further step)"
                      : " (preemption: no further step)"));
    engine_->request_checkpoint(preempted);
  }

  // The preemption's command came without a deadline: the head stops the attempt to resize the job
  // (it grows back onto returned capacity), not because a node leaves.
  bool resizing() const { return ctx_.signals != nullptr && ctx_.signals->preempt_deadline_ms.load() == 0; }

  // Rank 0 saves no emergency checkpoint: the head hears why (and stops the attempt); the ranks run
  // no further step.
  [[noreturn]] void decline_emergency_save(const std::string& why) {
    report_.no_emergency_save = why;
    if (ctx_.report) ctx_.report(report_);
    wait_until_cancelled(ctx_.cancelled, std::chrono::milliseconds(static_cast<std::int64_t>(
                                             (ctx_.spec.run.failure.preemption_grace_s + 60) * 1000)));
  }

  step_result train_step() {
    const step_result last = engine_->train_step();
    if (ctx_.step_reached) ctx_.step_reached->store(last.step);
    if (samples_) samples_->append(last.step, last.samples);
    const double tokens_per_s = last.seconds > 0 ? static_cast<double>(last.tokens) / last.seconds : 0;
    report_ =
        step_report{last.step,
                    total_,
                    last.loss,
                    last.lr,
                    last.grad_norm,
                    tokens_per_s,
                    mfu(tokens_per_s, engine_->flops_per_token(), engine_->peak_flops(), ctx_.world_size),
                    checkpoints_->committed_step(),
                    last.seconds,
                    last.optimizer_seconds};
    report_.host_update_seconds = last.host_update_seconds;
    report_.reward = last.reward;
    return last;
  }

  void evaluate_if_due(const step_result& last) {
    if (eval_every_ <= 0 || (last.step % eval_every_ != 0 && last.step != total_)) return;
    const eval_result eval = engine_->evaluate();
    report_.evaluated = true;
    report_.eval_loss = eval.loss;
    report_.eval_perplexity = std::exp(eval.loss);
    report_.eval_reward = eval.reward;
    const std::string accuracy = eval.reward ? ", accuracy " + std::to_string(eval.reward->accuracy) : "";
    if (ctx_.rank == 0)
      log("step " + std::to_string(last.step) + ": eval_loss " + std::to_string(eval.loss) + accuracy +
          " over " + std::to_string(eval.labels) + (eval.reward ? " pairs" : " tokens") + " in " +
          std::to_string(static_cast<long long>(eval.seconds * 1000)) + " ms");
  }

  // Logged before it is saved: a crash in between resumes from an older checkpoint, whose resume
  // drops the later lines, so metrics.jsonl never misses a step. An evaluated step is always logged.
  void report_step(const step_result& last) {
    if (last.step % ctx_.spec.train.log_every != 0 && last.step != total_ && !report_.evaluated) return;
    if (metrics_) metrics_->append(report_);
    if (events_) events_->add_scalars(last.step, scalars_of(report_, device_), unix_seconds_now());
    if (memory_) memory_->at_step(last.step);
    if (ctx_.report) ctx_.report(report_);
  }

  void save_if_due(const step_result& last) {
    const bool save = checkpoints_->due(last.step, total_) || last.checkpoint_requested;
    if (save || checkpoints_->replica_due(last.step)) {
      const auto started = std::chrono::steady_clock::now();
      auto part = engine_->checkpoint();
      const auto step = static_cast<std::uint64_t>(last.step);
      std::string done;
      if (save) {
        const bool background = checkpoints_->save(step, std::move(part.tensors), std::move(part.state),
                                                   metrics_of(report_), extra_);
        done = background ? "checkpoint saved in the background" : "checkpoint saved";
      } else {  // between the saves: the same state, kept in the nodes' memory only
        checkpoints_->replicate(step, part.tensors, part.state, metrics_of(report_), extra_);
        done = "replica kept in the nodes' memory on every rank";
      }
      const auto blocked = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started);
      if (ctx_.rank == 0)
        log("step " + std::to_string(last.step) + ": " + done + ", training blocked " +
            std::to_string(static_cast<long long>(blocked.count())) + " ms");
    }
    checkpoints_->log_commits();
  }

  // A node of this attempt is leaving (or the job resizes): the emergency checkpoint is this
  // step's. Waits for its commit, tells the head (which then stops the attempt) and runs no further
  // step.
  void stop_if_preempted(const step_result& last) {
    if (!last.preempted || last.step >= total_) return;
    checkpoints_->finish();
    checkpoints_->log_commits();
    if (ctx_.rank == 0) {
      report_.checkpoint_step = checkpoints_->committed_step();
      log(resizing() ? "resize: checkpoint of step " + std::to_string(last.step) +
                           " committed; waiting for the attempt to be stopped and restarted on more workers"
                     : "preempted: emergency checkpoint of step " + std::to_string(last.step) +
                           " committed; waiting for the attempt to be stopped");
      if (ctx_.report) ctx_.report(report_);
    }
    wait_until_cancelled(ctx_.cancelled, std::chrono::milliseconds(static_cast<std::int64_t>(
                                             (ctx_.spec.run.failure.preemption_grace_s + 60) * 1000)));
  }

  void after_step(const step_result& last) {
    if (last.step == first_step_ + 2) {  // the steady state's memory, for the plan; graphs captured
      log("rank " + std::to_string(ctx_.rank) + " memory after step " + std::to_string(last.step) + ": " +
          describe(read_memory_peaks(device_)));
      if (ctx_.rank == 0) log_if_any(engine_->step_graph_status());
      if (const auto t = core::model::gemm::tuning(); t.timed > 0)
        log("rank " + std::to_string(ctx_.rank) + " GEMMs: " + std::to_string(t.timed) + " shapes timed, " +
            std::to_string(t.replaced) + " of them on another algorithm than cuBLASLt's heuristic first");
    }
    pause_between_steps(ctx_);
  }

  // The final checkpoint committed, the export (rank 0), the last report.
  void finish() {
    checkpoints_->finish();
    const bool final_saved = ctx_.spec.run.checkpoint.final;
    // A request that came during the last steps, after rank 0 last looked, is answered by the
    // final checkpoint, or said to be unanswered, not dropped unsaid.
    if (checkpoints_->take_request())
      log(final_saved ? "checkpoint requested during the last step: the final checkpoint (step " +
                            std::to_string(checkpoints_->committed_step()) + ") answers it"
                      : "checkpoint requested during the last step: not saved (run.checkpoint.final is "
                        "false); the newest committed checkpoint is step " +
                            std::to_string(checkpoints_->committed_step()));
    if (ctx_.rank == 0 && final_saved) {
      phase_scope exporting(ctx_.activity, rank_phase::exporting);
      export_final_model(ctx_, checkpoints_->committed_step());
    }
    if (ctx_.rank == 0 && ctx_.report && report_.step > 0) {  // the final checkpoint, now committed
      report_.checkpoint_step = checkpoints_->committed_step();
      ctx_.report(report_);
    }
    log("rank " + std::to_string(ctx_.rank) + " done: final loss " + std::to_string(report_.loss) + "; " +
        describe(read_memory_peaks(device_)));
    checkpoints_->drop_replicas();  // the run is over: no restart needs them
    // From here the rank only closes its group and process (a peer may still save or export).
    if (ctx_.activity) ctx_.activity->set_phase(rank_phase::finished);
  }

  const worker_context& ctx_;
  const int device_;            // the CUDA device, or -1 on CPU
  const std::int64_t gpu_cap_;  // bytes, 0: none
  std::unique_ptr<comm::process_group> group_;
  step_gate gate_;
  std::unique_ptr<training_engine> engine_;
  std::unique_ptr<checkpointer> checkpoints_;
  std::optional<resume_point> from_;
  std::unique_ptr<metrics_log> metrics_;
  std::unique_ptr<event_file_writer> events_;
  std::unique_ptr<memory_status_log> memory_;
  std::unique_ptr<sample_log> samples_;
  std::unique_ptr<step_profiler> profiler_;  // run.profile_steps
  nlohmann::json extra_;  // every checkpoint's manifest extra
  std::int64_t first_step_ = 0, total_ = 0, eval_every_ = 0;
  step_report report_;  // the newest step's
};

}  // namespace

void causal_lm_workload::run(const worker_context& ctx) {
  const bool t5 = input_checked([&] {
    config::check_runnable(ctx.spec);
    check_data_set(ctx.spec);
    // Before the group: a rank that failed on its data after joining would close its
    // connections under peers still connecting, who would then report a peer failure instead.
    verify_data_files(ctx.spec);
    return is_t5_job(ctx.spec);
  });
  rank_run(ctx, t5).run();
}

}  // namespace cohort::core::train

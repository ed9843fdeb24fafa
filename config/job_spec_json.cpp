// to_json_text: the job spec as canonical JSON (every field, sorted keys, DeepSpeed already mapped).
#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"

namespace cohort::config {

std::string to_json_text(const job_spec& spec) {
  using json = nlohmann::json;
  json out;
  out["name"] = spec.name;
  out["workload"] = to_string(spec.workload);

  const model_spec& m = spec.model;
  if (!m.hf_dir.empty()) {
    out["model"] = {{"hf_dir", m.hf_dir}};
    if (m.lora.enabled) {
      out["model"]["lora"] = {{"r", m.lora.r},
                              {"alpha", m.lora.alpha},
                              {"dropout", m.lora.dropout},
                              {"target_modules", m.lora.target_modules}};
      if (m.lora.base_dtype) out["model"]["lora"]["base_dtype"] = to_string(*m.lora.base_dtype);
    }
    if (!m.added_tokens.empty()) out["model"]["added_tokens"] = m.added_tokens;
    if (m.pad_vocab_to_multiple_of != 1) out["model"]["pad_vocab_to_multiple_of"] = m.pad_vocab_to_multiple_of;
  } else if (!m.config_file.empty()) {
    out["model"] = {{"config", m.config_file}, {"init_seed", m.init_seed}};
  } else if (!m.inline_config_json.empty()) {
    out["model"] = {{"config", json::parse(m.inline_config_json)}, {"init_seed", m.init_seed}};
  }
  json data = json::object();
  if (!spec.data.train.empty()) data["train"] = spec.data.train;
  if (!spec.data.eval.empty()) data["eval"] = spec.data.eval;
  if (!spec.data.cache_dir.empty()) data["cache_dir"] = spec.data.cache_dir;
  if (spec.data.cache_bytes != data_spec{}.cache_bytes) data["cache_bytes"] = spec.data.cache_bytes;
  if (!data.empty() || !spec.data.verify) data["verify"] = spec.data.verify;
  if (!data.empty()) out["data"] = data;

  const scaling_spec& s = spec.scaling;
  out["scaling"] = {{"num_workers", s.num_workers},
                    {"min_workers", s.min_workers},
                    {"use_gpu", s.use_gpu},
                    {"resources_per_worker", s.resources_per_worker},
                    {"trainer_resources", s.trainer_resources},
                    {"placement_strategy", to_string(s.strategy)}};
  if (!s.nodes.empty()) out["scaling"]["nodes"] = s.nodes;
  const train_spec& t = spec.train;
  out["train"] = {{"seq_len", t.seq_len},
                  {"micro_batch_size", t.micro_batch_size},
                  {"grad_accum", t.grad_accum},
                  {"epochs", t.epochs},
                  {"max_steps", t.max_steps},
                  {"lr", t.lr},
                  {"beta1", t.beta1},
                  {"beta2", t.beta2},
                  {"eps", t.eps},
                  {"warmup_steps", t.warmup_steps},
                  {"schedule", to_string(t.schedule)},
                  {"min_lr_ratio", t.min_lr_ratio},
                  {"weight_decay", t.weight_decay},
                  {"grad_clip", t.grad_clip},
                  {"precision", to_string(t.dtype)},
                  {"seed", t.seed},
                  {"log_every", t.log_every},
                  {"activation_checkpointing", t.activation_checkpointing},
                  {"compute_path", to_string(t.path)},
                  {"loss_chunk_tokens", t.loss_chunk_tokens},
                  {"deterministic", t.deterministic},
                  {"step_delay_s", t.step_delay_s},
                  {"eval_every", t.eval_every}};
  out["zero"] = {{"stage", spec.zero.stage},
                 {"offload_optimizer", to_string(spec.zero.offload_optimizer)},
                 {"offload_param", to_string(spec.zero.offload_param)}};
  const run_spec& r = spec.run;
  out["run"] = {{"storage_path", r.storage_path},
                {"s3_endpoint", r.s3_endpoint},
                {"local_dir", r.local_dir},
                {"checkpoint",
                 {{"every_steps", r.checkpoint.every_steps},
                  {"num_to_keep", r.checkpoint.num_to_keep},
                  {"score_attribute", r.checkpoint.score_attribute},
                  {"score_order", to_string(r.checkpoint.order)},
                  {"async", r.checkpoint.async},
                  {"staging_bytes", r.checkpoint.staging_bytes},
                  {"export_every", r.checkpoint.export_every},
                  {"num_exports_to_keep", r.checkpoint.num_exports_to_keep}}},
                {"failure", {{"max_failures", r.failure.max_failures},
                             {"hang_timeout_s", r.failure.hang_timeout_s},
                             {"startup_timeout_s", r.failure.startup_timeout_s},
                             {"collective_timeout_s", r.failure.collective_timeout_s},
                             {"preemption_grace_s", r.failure.preemption_grace_s},
                             {"max_preemptions", r.failure.max_preemptions},
                             {"checkpoint_timeout_s", r.failure.checkpoint_timeout_s}}},
                {"resume", r.resume},
                {"hold_before_step", r.hold_before_step},
                {"hold_before_steps", r.hold_before_steps},
                {"sample_log", r.sample_log},
                {"memory_status_every_s", r.memory_status_every_s}};
  if (!spec.runtime_env.env_vars.empty())
    out["runtime_env"] = {{"env_vars", spec.runtime_env.env_vars}};
  return out.dump(2);
}

}  // namespace cohort::config

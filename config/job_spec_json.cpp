// to_json_text: the job spec as canonical JSON (every field, sorted keys, DeepSpeed already mapped).
#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"
#include "config/spec_fields.hpp"

namespace cohort::config {

std::string to_json_text(const job_spec& spec) {
  using json = nlohmann::json;
  json out;
  out["name"] = spec.name;
  out["workload"] = to_string(spec.workload);

  const model_spec& m = spec.model;
  if (!m.hf_dir.empty()) {
    out["model"] = {{"hf_dir", m.hf_dir}};
    if (m.lora.enabled) out["model"]["lora"] = fields_json(lora_fields(m.lora));
    if (!m.added_tokens.empty()) out["model"]["added_tokens"] = m.added_tokens;
    if (m.pad_vocab_to_multiple_of != 1) out["model"]["pad_vocab_to_multiple_of"] = m.pad_vocab_to_multiple_of;
  } else if (!m.config_file.empty()) {
    out["model"] = {{"config", m.config_file}, {"init_seed", m.init_seed}};
  } else if (!m.inline_config_json.empty()) {
    out["model"] = {{"config", json::parse(m.inline_config_json)}, {"init_seed", m.init_seed}};
  }
  // No data section when it holds only defaults (a job without a data set).
  const data_spec no_data{};
  if (spec.data.train != no_data.train || spec.data.eval != no_data.eval ||
      spec.data.cache_dir != no_data.cache_dir || spec.data.cache_bytes != no_data.cache_bytes ||
      spec.data.verify != no_data.verify)
    out["data"] = fields_json(data_fields(spec.data));

  const scaling_spec& s = spec.scaling;
  out["scaling"] = {{"num_workers", s.num_workers},
                    {"min_workers", s.min_workers},
                    {"resize_interval_s", s.resize_interval_s},
                    {"use_gpu", s.use_gpu},
                    {"resources_per_worker", s.resources_per_worker},
                    {"trainer_resources", s.trainer_resources},
                    {"placement_strategy", to_string(s.strategy)}};
  if (!s.nodes.empty()) out["scaling"]["nodes"] = s.nodes;
  out["train"] = fields_json(train_fields(spec.train));
  out["zero"] = fields_json(zero_fields(spec.zero));
  const run_spec& r = spec.run;
  out["run"] = {{"storage_path", r.storage_path},
                {"s3_endpoint", r.s3_endpoint},
                {"local_dir", r.local_dir},
                {"checkpoint", fields_json(checkpoint_fields(r.checkpoint))},
                {"failure", fields_json(failure_fields(r.failure))},
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

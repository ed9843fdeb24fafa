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
  // No model section without a model (the list writes the fields of the model's form).
  if (json model = fields_json(model_fields(spec.model)); !model.empty()) out["model"] = model;
  // No data section when it holds only defaults (a job without a data set).
  const data_spec no_data{};
  if (spec.data.train != no_data.train || spec.data.eval != no_data.eval ||
      spec.data.cache_dir != no_data.cache_dir || spec.data.cache_bytes != no_data.cache_bytes ||
      spec.data.verify != no_data.verify)
    out["data"] = fields_json(data_fields(spec.data));
  out["scaling"] = fields_json(scaling_fields(spec.scaling));
  out["train"] = fields_json(train_fields(spec.train));
  out["zero"] = fields_json(zero_fields(spec.zero));
  out["run"] = fields_json(run_fields(spec.run));
  if (!spec.runtime_env.env_vars.empty())
    out["runtime_env"] = fields_json(runtime_env_fields(spec.runtime_env));
  return out.dump(2);
}

}  // namespace cohort::config

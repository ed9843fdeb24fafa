// parse_job_spec / load_job_spec / check_runnable and the enum names.
#include "config/job_spec.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/deepspeed_mapping.hpp"
#include "config/json_fields.hpp"
#include "config/s3_url.hpp"
#include "config/spec_fields.hpp"

namespace cohort::config {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using given_map = std::map<std::string, std::string>;

template <class E>
const char* name_of(E value, const std::vector<std::pair<const char*, E>>& names) {
  for (const auto& [name, v] : names) {
    if (v == value) return name;
  }
  return "?";
}

std::string read_text_file(const std::string& file, const std::string& path, const char* what) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw spec_error(path, std::string("cannot read ") + what + " \"" + file +
                               "\"; check that the file exists and is readable");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json parse_json_text(const std::string& text, const std::string& path, const std::string& source) {
  check_json_limits(text, path, source);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number past double
    throw spec_error(path, source + " is not valid JSON: " + e.what());
  }
}

void check_name(const json& v, const std::string& path) {
  const std::string name = as_string(v, path);
  const bool ok = name.size() <= 128 && std::all_of(name.begin(), name.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                           c == '-';
                  });
  if (!ok) fail_value(path, v, "1-128 characters from [A-Za-z0-9._-]");
}

// model: its list and which form it takes, hf_dir (with what needs it) or config (a path or an
// inline object, with init_seed). The refusals come in the order they always have: the values of
// init_seed and pad_vocab_to_multiple_of, unknown keys, what needs hf_dir, added_tokens' and
// lora's values, the form, init_seed beside hf_dir, then the form's own values.
void parse_model(const json& v, const std::string& base_dir, model_spec& model) {
  object_reader r(v, "model");
  const auto fields = model_fields(model);
  register_keys(r, fields);
  read_fields_of(r, fields, base_dir, {"init_seed", "pad_vocab_to_multiple_of"});
  r.finish();
  const auto given = [&](const char* key) { return r.find(key) != nullptr; };
  const bool hf_dir = given("hf_dir");
  if (given("lora") && !hf_dir) {
    throw spec_error("model.lora", "needs model.hf_dir: LoRA adapts a trained Hugging Face model, "
                                   "which stays frozen");
  }
  if (given("added_tokens") && !hf_dir) {
    throw spec_error("model.added_tokens", "needs model.hf_dir: added tokens grow a trained Hugging Face "
                                           "model's vocabulary; a model built from config takes its "
                                           "vocabulary from the config's vocab_size");
  }
  if (given("pad_vocab_to_multiple_of") && !hf_dir) {
    throw spec_error("model.pad_vocab_to_multiple_of", "needs model.hf_dir: a model built from config "
                                                       "takes its vocabulary from the config's vocab_size");
  }
  read_fields_of(r, fields, base_dir, {"added_tokens"});
  read_fields_of(r, fields, base_dir, {"lora"});
  const json* config = r.find("config");
  if (hf_dir && config) {
    throw spec_error("model", "has both hf_dir and config; give {\"hf_dir\": DIR} to fine-tune or "
                              "{\"config\": FILE-or-object, \"init_seed\": S} to pretrain");
  }
  if (!hf_dir && !config) {
    throw spec_error("model", "needs hf_dir (a Hugging Face directory) or config (a config.json "
                              "path or an inline config object)");
  }
  if (hf_dir && given("init_seed")) {
    throw spec_error("model.init_seed",
                     "only applies to a model built from config; hf_dir "
                     "loads trained weights");
  }
  read_fields_of(r, fields, base_dir, {"init_seed", "pad_vocab_to_multiple_of", "added_tokens", "lora"},
                 selecting::others);
  // model.config's two forms are read by the list (config_form_rule); any other value is refused here.
  if (config && !config->is_object() && !config->is_string())
    fail_value("model.config", *config, "a config.json path or an inline config object");
}

void parse_data(const json& v, const std::string& base_dir, data_spec& data) {
  object_reader r(v, "data");
  read_fields(r, data_fields(data), base_dir);
  r.finish();
}

void parse_scaling(const json& v, scaling_spec& s, given_map& given) {
  object_reader r(v, "scaling", &given);
  read_fields(r, scaling_fields(s));
  r.finish();
  const bool explicit_resources = r.find("resources_per_worker") != nullptr;
  if (s.min_workers > s.num_workers)
    throw spec_error("scaling.min_workers",
                     "is " + std::to_string(s.min_workers) + " but must be at most scaling.num_workers (" +
                         std::to_string(s.num_workers) + "); 0 means num_workers (not elastic)");
  if (auto it = s.trainer_resources.find("GPU"); it != s.trainer_resources.end() && it->second > 0)
    throw spec_error("scaling.trainer_resources.GPU",
                     "got " + describe(it->second) + "; the trainer runs no GPU work: give GPUs to "
                     "the workers in scaling.resources_per_worker");
  if (auto it = s.resources_per_worker.find("GPU");
      it != s.resources_per_worker.end() && it->second > 1 &&
      std::fabs(it->second - std::round(it->second)) > 1e-9)
    throw spec_error("scaling.resources_per_worker.GPU",
                     "got " + describe(it->second) + "; expected a fraction of one GPU (below 1) "
                     "or a whole number of GPUs");
  if (!explicit_resources) {
    s.resources_per_worker = {{"CPU", 1.0}};
    if (s.use_gpu) s.resources_per_worker["GPU"] = 1.0;
    return;
  }
  const auto gpu = s.resources_per_worker.find("GPU");
  if (s.use_gpu) {
    if (gpu == s.resources_per_worker.end()) {
      s.resources_per_worker["GPU"] = 1.0;
    } else if (gpu->second <= 0.0) {
      throw spec_error("scaling.resources_per_worker.GPU",
                       "got 0 but scaling.use_gpu is true; give each worker a GPU quantity > 0 "
                       "or set use_gpu to false");
    }
  } else if (gpu != s.resources_per_worker.end() && gpu->second > 0.0) {
    throw spec_error("scaling.resources_per_worker.GPU",
                     "got " + describe(gpu->second) +
                         " but scaling.use_gpu is false; set use_gpu to true or remove GPU");
  }
}

void parse_train(const json& v, train_spec& t, given_map& given) {
  object_reader r(v, "train", &given);
  read_fields(r, train_fields(t));
  r.finish();
}

void parse_zero(const json& v, zero_spec& z, given_map& given) {
  object_reader r(v, "zero", &given);
  read_fields(r, zero_fields(z));
  r.finish();
}

// run: its list (its own fields, run.checkpoint and run.failure); the checkpoint and failure
// fields that depend on each other are checked after those sections are read, before the fields
// that follow them (the order the refusals have always come in).
void parse_run(const json& v, const std::string& base_dir, run_spec& run) {
  object_reader r(v, "run");
  const auto fields = run_fields(run);
  const std::vector<std::string_view> up_to_sections = {"storage_path", "s3_endpoint", "local_dir",
                                                        "checkpoint", "failure"};
  read_fields_of(r, fields, base_dir, up_to_sections);
  const auto& ck = run.checkpoint;
  if (ck.export_every > 0 && (ck.every_steps <= 0 || ck.export_every % ck.every_steps != 0))
    throw spec_error("run.checkpoint.export_every",
                     "is " + std::to_string(ck.export_every) + ", but exports are written from committed "
                     "checkpoints: it must be a multiple of run.checkpoint.every_steps (" +
                     std::to_string(ck.every_steps) + ")");
  if (ck.export_every > 0 && is_s3_url(run.storage_path))
    throw spec_error("run.checkpoint.export_every",
                     "is not supported with an s3:// run.storage_path yet (the final model is exported "
                     "and uploaded all the same); set it to 0");
  const auto& fs = run.failure;
  if (fs.startup_timeout_s < fs.hang_timeout_s)
    throw spec_error("run.failure.startup_timeout_s",
                     "is " + json(fs.startup_timeout_s).dump() + " but must be >= run.failure.hang_timeout_s (" +
                         json(fs.hang_timeout_s).dump() + "): it is the longer allowance before the first step");
  if (fs.collective_timeout_s <= fs.hang_timeout_s)
    throw spec_error("run.failure.collective_timeout_s",
                     "is " + json(fs.collective_timeout_s).dump() +
                         " but must be > run.failure.hang_timeout_s (" + json(fs.hang_timeout_s).dump() +
                         "), so a hung rank is named before the ranks waiting "
                         "on it time out");
  read_fields_of(r, fields, base_dir, up_to_sections, selecting::others);
  r.finish();
}

void parse_runtime_env(const json& v, runtime_env_spec& env) {
  object_reader r(v, "runtime_env");
  const auto fields = runtime_env_fields(env);
  register_keys(r, fields);  // unknown keys are refused before the variables are checked
  r.finish();
  read_fields(r, fields);
}

// Rules that involve more than one field, checked after the DeepSpeed block is applied.
// A listed step after train.max_steps (when set) would never come: refused by name.
void refuse_steps_after_the_last(const job_spec& spec, const std::vector<std::int64_t>& steps,
                                 const char* field, const char* verb) {
  if (spec.train.max_steps <= 0 || steps.empty() || steps.back() <= spec.train.max_steps) return;
  const auto last = std::to_string(spec.train.max_steps);
  throw spec_error(field, "got step " + std::to_string(steps.back()) +
                              ", after the last step (train.max_steps " + last + "): the job would never " +
                              verb + " there; allowed: 1 to " + last);
}

void check_cross_fields(const job_spec& spec) {
  if (spec.train.epochs == 0 && spec.train.max_steps == 0) {
    throw spec_error("train", "epochs and max_steps are both 0; set epochs >= 1 or max_steps >= 1");
  }
  if (spec.zero.offload_optimizer == offload_device::cpu && spec.zero.stage == 0) {
    throw spec_error("zero.offload_optimizer",
                     "got \"cpu\" with zero.stage 0; optimizer offload needs zero.stage 1, 2 or 3");
  }
  if (spec.zero.offload_param == offload_device::cpu && spec.zero.stage != 3) {
    throw spec_error("zero.offload_param",
                     "got \"cpu\" with zero.stage " + std::to_string(spec.zero.stage) +
                         "; parameter offload needs zero.stage 3 (allowed otherwise: \"none\")");
  }
  if (spec.run.checkpoint.replicate && spec.zero.stage == 0)
    throw spec_error("run.checkpoint.replicate",
                     "got true with zero.stage 0; peer replicas need zero.stage 1, 2 or 3 (with stage 0 "
                     "rank 0 alone saves the state, which no other rank's replica would hold)");
  if (spec.run.checkpoint.replicate_every > 0 && !spec.run.checkpoint.replicate)
    throw spec_error("run.checkpoint.replicate_every",
                     "got " + std::to_string(spec.run.checkpoint.replicate_every) +
                         " without run.checkpoint.replicate true; replicas between the saves are peer "
                         "replicas (allowed otherwise: 0)");
  if (spec.zero.delayed_param_update && spec.zero.offload_param != offload_device::cpu)
    throw spec_error("zero.delayed_param_update",
                     "got true without zero.offload_param \"cpu\"; the update is delayed only on the host, "
                     "beside the next step (allowed otherwise: false)");
  if (spec.zero.layers_kept_gathered > 0 && spec.zero.stage != 3)
    throw spec_error("zero.layers_kept_gathered",
                     "got " + std::to_string(spec.zero.layers_kept_gathered) + " with zero.stage " +
                         std::to_string(spec.zero.stage) +
                         "; only stage 3 gathers layers (allowed otherwise: 0, the default)");
  refuse_steps_after_the_last(spec, spec.run.hold_before_steps, "run.hold_before_steps", "hold");
  refuse_steps_after_the_last(spec, spec.run.profile_steps, "run.profile_steps", "profile");
  if (spec.train.eval_every > 0 && spec.data.eval.empty())
    throw spec_error("train.eval_every", "got " + std::to_string(spec.train.eval_every) +
                                             " but data.eval is not set; give data.eval (a directory written by "
                                             "`cohort-data build`) or set eval_every to 0");
  if (const auto& attribute = spec.run.checkpoint.score_attribute; !attribute.empty()) {
    const auto allowed = score_attributes(spec);
    if (std::find(allowed.begin(), allowed.end(), attribute) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
      throw spec_error("run.checkpoint.score_attribute",
                       "got \"" + attribute + "\", not a metric this job records; allowed: " + list +
                           (spec.data.eval.empty() ? " (eval_loss and eval_perplexity need data.eval)" : "") +
                           ", or \"\" to keep the newest");
    }
  }
  if (spec.train.max_steps > 0 && spec.run.hold_before_step > spec.train.max_steps) {
    const auto last = std::to_string(spec.train.max_steps);
    throw spec_error("run.hold_before_step", "got " + std::to_string(spec.run.hold_before_step) +
                                                 ", after the last step (train.max_steps " + last +
                                                 "): the job would never hold; allowed: 0 (none) to " + last);
  }
}

}  // namespace

const char* const runtime_env_rules =
    "variable names from [A-Za-z0-9_] (e.g. NCCL_DEBUG, HF_HOME, OMP_NUM_THREADS) with string "
    "values, at most 64 variables of at most 4096 bytes each; refused are names that change what "
    "code is loaded or run (LD_*, PATH and *PATH, *_PRELOAD, PYTHON*, PERL5*, PERLLIB, RUBY*, "
    "NODE_OPTIONS, BASH_ENV, BASH_FUNC_*, ENV, IFS, SHELLOPTS, BASHOPTS, PS4, MALLOC_*, "
    "GLIBC_TUNABLES, LOCPATH, NLSPATH, HOSTALIASES, RES_OPTIONS, NCCL_*_PLUGIN, CUDA_INJECTION*), "
    "CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES (the head assigns GPUs) and COHORT_* except "
    "COHORT_GPU_MEMORY_LIMIT_GB (a number of GiB > 0)";

void check_json_limits(const std::string& text, const std::string& path, const std::string& source) {
  if (text.size() > max_spec_bytes) {
    throw spec_error(path, source + " is " + std::to_string(text.size()) +
                               " bytes; the limit is " + std::to_string(max_spec_bytes) +
                               " bytes (1 MiB); give large model configs as a file (model.config: "
                               "PATH or model.hf_dir)");
  }
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_spec_depth) {
        throw spec_error(path, source + " nests arrays/objects deeper than the limit of " +
                                   std::to_string(max_spec_depth) + " levels");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

std::vector<std::string> score_attributes(const job_spec& spec) {
  std::vector<std::string> names{"loss", "lr", "grad_norm", "tokens_per_s", "mfu"};
  if (!spec.data.eval.empty()) {
    names.emplace_back("eval_loss");
    names.emplace_back("eval_perplexity");
  }
  return names;
}

bool has_holds(const run_spec& run) { return run.hold_before_step > 0 || !run.hold_before_steps.empty(); }

bool holds_before(const run_spec& run, std::int64_t step) {
  return step == run.hold_before_step ||
         std::find(run.hold_before_steps.begin(), run.hold_before_steps.end(), step) != run.hold_before_steps.end();
}

double gpu_memory_limit_gib(const std::string& text) {
  char* end = nullptr;
  const double gib = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(gib > 0) || !std::isfinite(gib)) return 0;
  return gib;
}

job_spec parse_job_spec(const std::string& json_text, const std::string& base_dir) {
  const json root = parse_json_text(json_text, "", "the job spec");
  job_spec spec;
  given_map given;
  object_reader r(root, "");
  check_name(r.require("name", "the job name, 1-128 characters from [A-Za-z0-9._-]"), "name");
  spec.name = root.at("name").get<std::string>();
  r.read_enum("workload", spec.workload, workload_names);
  if (const json* v = r.find("model")) parse_model(*v, base_dir, spec.model);
  if (const json* v = r.find("data")) parse_data(*v, base_dir, spec.data);
  const json* scaling = r.find("scaling");
  parse_scaling(scaling ? *scaling : json::object(), spec.scaling, given);
  if (const json* v = r.find("train")) parse_train(*v, spec.train, given);
  if (const json* v = r.find("zero")) parse_zero(*v, spec.zero, given);
  if (const json* v = r.find("run")) parse_run(*v, base_dir, spec.run);
  if (const json* v = r.find("runtime_env")) parse_runtime_env(*v, spec.runtime_env);
  const json* deepspeed = r.find("deepspeed");
  r.finish();
  if (deepspeed) {
    if (deepspeed->is_string()) {
      const std::string file = resolved_path(base_dir, as_string(*deepspeed, "deepspeed"));
      const json ds = parse_json_text(read_text_file(file, "deepspeed", "DeepSpeed config"),
                                      "deepspeed", "DeepSpeed config \"" + file + "\"");
      apply_deepspeed(ds, "deepspeed", spec, given);
    } else if (deepspeed->is_object()) {
      apply_deepspeed(*deepspeed, "deepspeed", spec, given);
    } else {
      fail_value("deepspeed", *deepspeed, "a DeepSpeed config file path or an inline object");
    }
  }
  check_cross_fields(spec);
  return spec;
}

job_spec load_job_spec(const std::string& path) {
  const std::string text = read_text_file(path, "", "job spec");
  std::error_code ec;
  const fs::path file = fs::absolute(path, ec);
  if (ec) throw spec_error("", "cannot make \"" + path + "\" absolute: " + ec.message());
  job_spec spec = parse_job_spec(text, file.parent_path().string());
  // Only the default can still be relative here: every path written in the file was resolved.
  if (!is_s3_url(spec.run.storage_path) && fs::path(spec.run.storage_path).is_relative()) {
    const fs::path storage = fs::absolute(spec.run.storage_path, ec);
    if (ec) throw spec_error("run.storage_path", "cannot make \"" + spec.run.storage_path + "\" absolute: " + ec.message());
    spec.run.storage_path = storage.lexically_normal().string();
  }
  return spec;
}

void check_runnable(const job_spec& spec) {
  if (!trains_model(spec.workload)) return;
  const model_spec& m = spec.model;
  const std::string workload = to_string(spec.workload);
  if (m.hf_dir.empty() && m.config_file.empty() && m.inline_config_json.empty()) {
    throw spec_error("model", "missing; workload " + workload +
                                  " needs {\"hf_dir\": DIR} or "
                                  "{\"config\": FILE-or-object, \"init_seed\": S}");
  }
  if (spec.workload == workload_kind::reward_model && m.lora.enabled) {
    throw spec_error("model.lora", "workload reward_model trains the whole model and its score head; LoRA "
                                   "adapters are not supported for it (remove model.lora)");
  }
  if (spec.data.train.empty()) {
    throw spec_error("data.train", "missing; workload " + workload +
                                       " needs a token-shard directory "
                                       "written by `cohort-data build`" +
                                       (spec.workload == workload_kind::reward_model ? " --pairs" : ""));
  }
}

job_spec shrunk_to(const job_spec& spec, int workers) {
  const std::int64_t per_step = std::int64_t{spec.train.grad_accum} * spec.scaling.num_workers;
  if (workers < 1 || workers > spec.scaling.num_workers || per_step % workers != 0)
    throw spec_error("scaling.min_workers",
                     "an attempt on " + std::to_string(workers) + " of " +
                         std::to_string(spec.scaling.num_workers) + " workers cannot keep the global batch: " +
                         "train.grad_accum × scaling.num_workers = " + std::to_string(per_step) +
                         " is not a multiple of " + std::to_string(workers));
  job_spec out = spec;
  out.scaling.num_workers = workers;
  out.train.grad_accum = static_cast<int>(per_step / workers);
  return out;
}

const char* to_string(placement_strategy s) { return name_of(s, strategy_names); }
const char* to_string(lr_schedule s) { return name_of(s, schedule_names); }
const char* to_string(precision p) { return name_of(p, precision_names); }

const std::vector<std::string>& lora_module_names() {
  // Llama, Mistral, Qwen2: q/k/v/o_proj, gate/up/down_proj; GPT-2: c_attn, c_proj, c_fc; OPT:
  // out_proj, fc1, fc2; GPT-J: out_proj, fc_in, fc_out.
  static const std::vector<std::string> names = {
      "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "c_attn",
      "c_proj", "c_fc", "out_proj", "fc1", "fc2", "fc_in", "fc_out"};
  return names;
}
const char* to_string(compute_path p) { return name_of(p, compute_path_names); }
const char* to_string(offload_device d) { return name_of(d, offload_names); }
const char* to_string(workload_kind w) { return name_of(w, workload_names); }
const char* to_string(score_order o) { return name_of(o, order_names); }

std::string local_run_dir(const std::string& name, const std::string& storage_path, const std::string& local_dir) {
  if (!is_s3_url(storage_path)) return storage_path + "/" + name;
  return (local_dir.empty() ? (std::filesystem::temp_directory_path() / "cohort-runs").string() : local_dir) + "/" +
         name;
}

}  // namespace cohort::config

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
#include "config/nodes_spec.hpp"
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

void parse_lora(const json& v, lora_spec& lora) {
  object_reader r(v, "model.lora");
  lora.enabled = true;
  read_fields(r, lora_fields(lora));
  r.finish();
  check_required("model.lora", lora_fields(lora));
}

void parse_model(const json& v, const std::string& base_dir, model_spec& model) {
  object_reader r(v, "model");
  const json* hf_dir = r.find("hf_dir");
  const json* config = r.find("config");
  const bool has_seed = r.read("init_seed", model.init_seed);
  const json* lora = r.find("lora");
  const json* added_tokens = r.find("added_tokens");
  const bool has_multiple = r.read("pad_vocab_to_multiple_of", model.pad_vocab_to_multiple_of, 1, 65536);
  r.finish();
  if (lora && !hf_dir) {
    throw spec_error("model.lora", "needs model.hf_dir: LoRA adapts a trained Hugging Face model, "
                                   "which stays frozen");
  }
  if (added_tokens && !hf_dir) {
    throw spec_error("model.added_tokens", "needs model.hf_dir: added tokens grow a trained Hugging Face "
                                           "model's vocabulary; a model built from config takes its "
                                           "vocabulary from the config's vocab_size");
  }
  if (has_multiple && !hf_dir) {
    throw spec_error("model.pad_vocab_to_multiple_of", "needs model.hf_dir: a model built from config "
                                                       "takes its vocabulary from the config's vocab_size");
  }
  if (added_tokens)
    model.added_tokens = resolved_path(base_dir, as_string(*added_tokens, "model.added_tokens"));
  if (lora) parse_lora(*lora, model.lora);
  if (hf_dir && config) {
    throw spec_error("model", "has both hf_dir and config; give {\"hf_dir\": DIR} to fine-tune or "
                              "{\"config\": FILE-or-object, \"init_seed\": S} to pretrain");
  }
  if (!hf_dir && !config) {
    throw spec_error("model", "needs hf_dir (a Hugging Face directory) or config (a config.json "
                              "path or an inline config object)");
  }
  if (hf_dir) {
    if (has_seed) {
      throw spec_error("model.init_seed", "only applies to a model built from config; hf_dir "
                                          "loads trained weights");
    }
    model.hf_dir = path_value(as_string(*hf_dir, "model.hf_dir"), "model.hf_dir", base_dir, path_rule{true});
  } else if (config->is_object()) {
    model.inline_config_json = config->dump();
  } else if (config->is_string()) {
    model.config_file = resolved_path(base_dir, as_string(*config, "model.config"));
  } else {
    fail_value("model.config", *config, "a config.json path or an inline config object");
  }
}

void parse_data(const json& v, const std::string& base_dir, data_spec& data) {
  object_reader r(v, "data");
  read_fields(r, data_fields(data), base_dir);
  r.finish();
}

void parse_scaling(const json& v, scaling_spec& s, given_map& given) {
  object_reader r(v, "scaling", &given);
  r.read("num_workers", s.num_workers, 1, 65536);
  r.read("min_workers", s.min_workers, 0, 65536);
  r.read("resize_interval_s", s.resize_interval_s, number_range{0.0, true, max_timeout_s, true});
  r.read("use_gpu", s.use_gpu);
  const bool explicit_resources = r.read("resources_per_worker", s.resources_per_worker);
  r.read("trainer_resources", s.trainer_resources);
  r.read_enum("placement_strategy", s.strategy, strategy_names);
  if (const json* nodes = r.find("nodes")) {
    const std::string path = r.child("nodes");
    if (!nodes->is_array()) fail_value(path, *nodes, "an array of node names, e.g. [\"n1\", \"n2\"]");
    for (std::size_t i = 0; i < nodes->size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      const json& v = (*nodes)[i];
      if (!v.is_string() || !valid_node_name(v.get<std::string>()))
        fail_value(at, v, std::string("a node name, ") + node_name_rule);
      if (std::find(s.nodes.begin(), s.nodes.end(), v.get<std::string>()) != s.nodes.end())
        throw spec_error(at, "node \"" + v.get<std::string>() + "\" is named twice; name each node once");
      s.nodes.push_back(v.get<std::string>());
    }
  }
  r.finish();
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

void parse_run(const json& v, const std::string& base_dir, run_spec& run) {
  object_reader r(v, "run");
  if (r.read("storage_path", run.storage_path))
    run.storage_path = path_value(run.storage_path, "run.storage_path", base_dir, path_rule{true});
  if (r.read("s3_endpoint", run.s3_endpoint, true) && !run.s3_endpoint.empty() &&
      run.s3_endpoint.rfind("http://", 0) != 0 && run.s3_endpoint.rfind("https://", 0) != 0)
    throw spec_error("run.s3_endpoint", "\"" + run.s3_endpoint +
                                            "\" must be an endpoint URL, http(s)://HOST[:PORT] (\"\": AWS's, or "
                                            "AWS_ENDPOINT_URL)");
  if (r.read("local_dir", run.local_dir, true)) run.local_dir = resolved_path(base_dir, run.local_dir);
  if (const json* c = r.find("checkpoint")) {
    object_reader cr(*c, "run.checkpoint");
    read_fields(cr, checkpoint_fields(run.checkpoint));
    cr.finish();
  }
  if (const json* f = r.find("failure")) {
    object_reader fr(*f, "run.failure");
    read_fields(fr, failure_fields(run.failure));
    fr.finish();
  }
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
                     "is " + json(fs.collective_timeout_s).dump() + " but must be > run.failure.hang_timeout_s (" +
                         json(fs.hang_timeout_s).dump() + "), so a hung rank is named before the ranks waiting "
                         "on it time out");
  r.read("resume", run.resume);
  r.read("hold_before_step", run.hold_before_step, std::int64_t{0});
  if (const json* steps = r.find("hold_before_steps")) {
    const std::string path = r.child("hold_before_steps");
    if (!steps->is_array()) fail_value(path, *steps, "an array of strictly increasing steps >= 1");
    std::int64_t last = 0;
    for (std::size_t i = 0; i < steps->size(); ++i) {
      const json& v = (*steps)[i];
      const std::string at = path + "[" + std::to_string(i) + "]";
      if (!v.is_number_integer() || v.get<std::int64_t>() <= last)
        fail_value(at, v, last == 0 ? "an integer step >= 1" : "an integer step > " + std::to_string(last) +
                                                                  " (the steps strictly increase)");
      last = v.get<std::int64_t>();
      run.hold_before_steps.push_back(last);
    }
  }
  r.read("sample_log", run.sample_log);
  r.read("memory_status_every_s", run.memory_status_every_s, number_range{0.0, true, max_timeout_s, true});
  r.finish();
}

// Why an environment variable name may not be set by a job ("" when it may).
std::string refused_env_name(const std::string& name) {
  const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  const auto ends = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (name.empty() || name.size() > 128 || std::isdigit(static_cast<unsigned char>(name[0])) ||
      !std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      }))
    return "is not a valid variable name (1-128 characters from [A-Za-z0-9_], not starting with a digit)";
  if (name == "CUDA_VISIBLE_DEVICES" || name == "NVIDIA_VISIBLE_DEVICES")
    return "is set by cohort: the head assigns each worker its GPUs";
  if (starts("COHORT_") && name != gpu_memory_limit_variable)
    return std::string("is cohort's own; the only COHORT_ variable a job may set is ") +
           gpu_memory_limit_variable;
  if (starts("LD_") || ends("PATH") || ends("_PRELOAD") || starts("PYTHON") || starts("PERL5") ||
      name == "PERLLIB" || starts("RUBY") || name == "NODE_OPTIONS" || name == "BASH_ENV" ||
      name == "ENV" || name == "IFS" || name == "SHELLOPTS" || name == "BASHOPTS" || name == "PS4" ||
      starts("BASH_FUNC_") || starts("MALLOC_") || name == "GLIBC_TUNABLES" ||
      name == "LOCPATH" || name == "NLSPATH" || name == "HOSTALIASES" || name == "RES_OPTIONS" ||
      (starts("NCCL_") && ends("_PLUGIN")) || starts("CUDA_INJECTION"))
    return "could change what code the worker process loads or runs";
  return "";
}

void parse_runtime_env(const json& v, runtime_env_spec& env) {
  object_reader r(v, "runtime_env");
  const json* vars = r.find("env_vars");
  r.finish();
  if (vars == nullptr) return;
  if (!vars->is_object())
    fail_value("runtime_env.env_vars", *vars, "an object of variable name -> string value");
  if (vars->size() > max_env_vars)
    throw spec_error("runtime_env.env_vars", "has " + std::to_string(vars->size()) +
                                                 " variables; at most " +
                                                 std::to_string(max_env_vars) + " are allowed");
  for (const auto& [name, value] : vars->items()) {
    const std::string path = "runtime_env.env_vars." + name;
    if (const auto why = refused_env_name(name); !why.empty())
      throw spec_error(path, "refused: " + why + ". Allowed: " + runtime_env_rules);
    const std::string text = as_string(value, path, true);
    if (text.size() > max_env_var_bytes || text.find('\0') != std::string::npos)
      fail_value(path, value, "a string of at most " + std::to_string(max_env_var_bytes) +
                                  " bytes without NUL characters");
    if (name == gpu_memory_limit_variable && gpu_memory_limit_gib(text) <= 0)
      fail_value(path, value, "a number of GiB > 0 as a string, e.g. \"20\"");
    env.env_vars[name] = text;
  }
}

// Rules that involve more than one field, checked after the DeepSpeed block is applied.
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
  if (spec.zero.delayed_param_update && spec.zero.offload_param != offload_device::cpu)
    throw spec_error("zero.delayed_param_update",
                     "got true without zero.offload_param \"cpu\"; the update is delayed only on the host, "
                     "beside the next step (allowed otherwise: false)");
  if (spec.train.max_steps > 0 && !spec.run.hold_before_steps.empty() &&
      spec.run.hold_before_steps.back() > spec.train.max_steps) {
    const auto last = std::to_string(spec.train.max_steps);
    throw spec_error("run.hold_before_steps", "got step " + std::to_string(spec.run.hold_before_steps.back()) +
                                                  ", after the last step (train.max_steps " + last +
                                                  "): the job would never hold there; allowed: 1 to " + last);
  }
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

}  // namespace cohort::config

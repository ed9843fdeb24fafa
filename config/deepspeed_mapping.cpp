// Maps a DeepSpeed config onto the job spec's fields (see deepspeed_mapping.hpp).
#include "config/deepspeed_mapping.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "config/json_fields.hpp"

namespace cohort::config {
namespace {

using json = nlohmann::json;
using given_map = std::map<std::string, std::string>;

bool is_auto(const json* v) { return v && v->is_string() && v->get<std::string>() == "auto"; }

// A present, non-"auto" value.
const json* value_of(object_reader& r, const std::string& key) {
  const json* v = r.find(key);
  return is_auto(v) ? nullptr : v;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Keys that tune DeepSpeed's own performance or logging; ignoring them changes no result.
void accept_harmless(object_reader& r, const std::vector<const char*>& keys) {
  for (const char* key : keys) r.find(key);
}

// Sets one cohort field from a DeepSpeed value, refusing to silently override an explicit one.
class field_mapper {
 public:
  field_mapper(job_spec& spec, given_map& given) : spec_(spec), given_(given) {}

  template <class T>
  void set(const std::string& ds_path, const std::string& cohort_path, T& field, const T& value) {
    const auto it = given_.find(cohort_path);
    if (it != given_.end() && !(field == value)) {
      throw spec_error(ds_path, "got " + describe(json(value)) + ", which conflicts with " +
                                    it->second + " = " + describe(json(field)) +
                                    "; remove one of them or make them equal");
    }
    field = value;
    if (it == given_.end()) given_[cohort_path] = ds_path;
  }
  // Enums are compared and shown by their JSON names.
  template <class E>
  void set_enum(const std::string& ds_path, const std::string& cohort_path, E& field, E value) {
    const auto it = given_.find(cohort_path);
    if (it != given_.end() && field != value) {
      throw spec_error(ds_path, std::string("means ") + cohort_path + " = \"" + to_string(value) +
                                    "\", which conflicts with " + it->second + " = \"" +
                                    to_string(field) + "\"; remove one of them or make them equal");
    }
    field = value;
    if (it == given_.end()) given_[cohort_path] = ds_path;
  }
  job_spec& spec() { return spec_; }

 private:
  job_spec& spec_;
  given_map& given_;
};

// zero_optimization.offload_optimizer / offload_param: {"device": "none" | "cpu", ...} onto the
// cohort field `field` (`target`); the other keys DeepSpeed takes there change nothing here.
void map_offload(const json& v, const std::string& path, const char* field, offload_device& target,
                 const std::vector<const char*>& harmless, field_mapper& m) {
  object_reader r(v, path);
  if (const json* d = value_of(r, "device")) {
    const auto device = as_enum<offload_device>(*d, r.child("device"),
                                                {{"none", offload_device::none},
                                                 {"cpu", offload_device::cpu}});
    m.set_enum(r.child("device"), field, target, device);
  }
  accept_harmless(r, harmless);
  r.finish();
}

void map_zero(const json& v, const std::string& path, field_mapper& m) {
  object_reader r(v, path);
  if (const json* s = value_of(r, "stage")) {
    const int stage = static_cast<int>(as_integer(*s, r.child("stage"), 0, 3));
    m.set(r.child("stage"), "zero.stage", m.spec().zero.stage, stage);
  }
  if (const json* o = r.find("offload_optimizer"))
    map_offload(*o, r.child("offload_optimizer"), "zero.offload_optimizer",
                m.spec().zero.offload_optimizer, {"pin_memory", "buffer_count", "fast_init"}, m);
  if (const json* o = r.find("offload_param"))
    map_offload(*o, r.child("offload_param"), "zero.offload_param", m.spec().zero.offload_param,
                {"pin_memory", "buffer_count", "buffer_size", "max_in_cpu"}, m);
  accept_harmless(r, {"contiguous_gradients", "overlap_comm", "reduce_scatter", "reduce_bucket_size",
                      "allgather_partitions", "allgather_bucket_size", "round_robin_gradients",
                      "sub_group_size", "stage3_prefetch_bucket_size",
                      "stage3_param_persistence_threshold", "stage3_max_live_parameters",
                      "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
                      "gather_16bit_weights_on_model_save", "load_from_fp32_weights",
                      "ignore_unused_parameters", "memory_efficient_linear"});
  r.finish();
}

void map_bf16(const json& v, const std::string& path, field_mapper& m) {
  object_reader r(v, path);
  if (const json* e = value_of(r, "enabled")) {
    const bool on = as_bool(*e, r.child("enabled"));
    m.set_enum(r.child("enabled"), "train.precision", m.spec().train.dtype,
               on ? precision::bf16 : precision::fp32);
  }
  accept_harmless(r, {"immediate_grad_update"});
  r.finish();
}

void map_fp16(const json& v, const std::string& path) {
  object_reader r(v, path);
  if (const json* e = value_of(r, "enabled"); e && as_bool(*e, r.child("enabled"))) {
    fail_value(r.child("enabled"), *e,
               "false: cohort trains in fp32 or bf16 (use \"bf16\": {\"enabled\": true})");
  }
  accept_harmless(r, {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                      "consecutive_hysteresis", "min_loss_scale", "auto_cast"});
  r.finish();
}

void map_optimizer(const json& v, const std::string& path, field_mapper& m) {
  object_reader r(v, path);
  if (const json* t = value_of(r, "type")) {
    const std::string type = as_string(*t, r.child("type"));
    if (lower(type) != "adamw" && lower(type) != "adam") {
      fail_value(r.child("type"), *t, "\"AdamW\" or \"Adam\" (cohort's optimizer is AdamW)");
    }
  }
  if (const json* p = r.find("params")) {
    object_reader pr(*p, r.child("params"));
    train_spec& t = m.spec().train;
    if (const json* lr = value_of(pr, "lr")) {
      m.set(pr.child("lr"), "train.lr", t.lr, as_number(*lr, pr.child("lr"), {0.0, false}));
    }
    if (const json* betas = value_of(pr, "betas")) {
      const std::string bp = pr.child("betas");
      if (!betas->is_array() || betas->size() != 2) fail_value(bp, *betas, "[beta1, beta2]");
      const number_range unit_open{0.0, true, 1.0, false};
      m.set(bp + "[0]", "train.beta1", t.beta1, as_number((*betas)[0], bp + "[0]", unit_open));
      m.set(bp + "[1]", "train.beta2", t.beta2, as_number((*betas)[1], bp + "[1]", unit_open));
    }
    if (const json* eps = value_of(pr, "eps")) {
      m.set(pr.child("eps"), "train.eps", t.eps, as_number(*eps, pr.child("eps"), {0.0, false}));
    }
    if (const json* wd = value_of(pr, "weight_decay")) {
      m.set(pr.child("weight_decay"), "train.weight_decay", t.weight_decay,
            as_number(*wd, pr.child("weight_decay"), non_negative));
    }
    for (const char* key : {"adam_w_mode", "bias_correction"}) {
      if (const json* b = value_of(pr, key); b && !as_bool(*b, pr.child(key))) {
        fail_value(pr.child(key), *b, "true (cohort's optimizer is AdamW with bias correction)");
      }
    }
    accept_harmless(pr, {"torch_adam", "fused"});
    pr.finish();
  }
  r.finish();
}

// DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR in terms of cohort's linear warmup from 0
// followed by a constant / linear / cosine schedule that ends at the last training step.
void map_scheduler(const json& v, const std::string& path, field_mapper& m) {
  object_reader r(v, path);
  const json& type_value = r.require("type", "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"");
  const std::string type = as_string(type_value, r.child("type"));
  lr_schedule schedule = lr_schedule::constant;
  if (type == "WarmupLR") {
    schedule = lr_schedule::constant;
  } else if (type == "WarmupDecayLR") {
    schedule = lr_schedule::linear;
  } else if (type == "WarmupCosineLR") {
    schedule = lr_schedule::cosine;
  } else {
    fail_value(r.child("type"), type_value, "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"");
  }
  train_spec& t = m.spec().train;
  m.set_enum(r.child("type"), "train.schedule", t.schedule, schedule);
  if (const json* p = r.find("params")) {
    object_reader pr(*p, r.child("params"));
    if (const json* w = value_of(pr, "warmup_num_steps")) {
      m.set(pr.child("warmup_num_steps"), "train.warmup_steps", t.warmup_steps,
            static_cast<int>(as_integer(*w, pr.child("warmup_num_steps"), 0, 1 << 30)));
    }
    if (const json* w = value_of(pr, "warmup_type")) {
      as_enum<int>(*w, pr.child("warmup_type"), {{"linear", 0}});
    }
    // cohort's warmup starts from 0.
    const char* warmup_start = type == "WarmupCosineLR" ? "warmup_min_ratio" : "warmup_min_lr";
    if (const json* lo = value_of(pr, warmup_start);
        lo && as_number(*lo, pr.child(warmup_start), non_negative) != 0.0) {
      fail_value(pr.child(warmup_start), *lo, "0 (cohort warms up linearly from 0)");
    }
    if (const json* total = value_of(pr, "total_num_steps"); total && type != "WarmupLR") {
      m.set(pr.child("total_num_steps"), "train.max_steps", t.max_steps,
            as_integer(*total, pr.child("total_num_steps"), 1));
    }
    if (type == "WarmupCosineLR") {
      if (const json* ratio = value_of(pr, "cos_min_ratio")) {
        m.set(pr.child("cos_min_ratio"), "train.min_lr_ratio", t.min_lr_ratio,
              as_number(*ratio, pr.child("cos_min_ratio"), {0.0, true, 1.0, true}));
      }
    } else if (const json* hi = value_of(pr, "warmup_max_lr")) {
      m.set(pr.child("warmup_max_lr"), "train.lr", t.lr,
            as_number(*hi, pr.child("warmup_max_lr"), {0.0, false}));
    }
    pr.finish();
  }
  r.finish();
}

}  // namespace

void apply_deepspeed(const json& ds, const std::string& path, job_spec& spec, given_map& given) {
  field_mapper m(spec, given);
  object_reader r(ds, path);
  train_spec& t = spec.train;
  if (const json* v = value_of(r, "train_micro_batch_size_per_gpu")) {
    const std::string p = r.child("train_micro_batch_size_per_gpu");
    m.set(p, "train.micro_batch_size", t.micro_batch_size,
          static_cast<int>(as_integer(*v, p, 1, max_micro_batch_size)));
  }
  if (const json* v = value_of(r, "gradient_accumulation_steps")) {
    const std::string p = r.child("gradient_accumulation_steps");
    m.set(p, "train.grad_accum", t.grad_accum, static_cast<int>(as_integer(*v, p, 1, max_grad_accum)));
  }
  if (const json* v = value_of(r, "gradient_clipping")) {
    m.set(r.child("gradient_clipping"), "train.grad_clip", t.grad_clip,
          as_number(*v, r.child("gradient_clipping"), non_negative));
  }
  if (const json* v = r.find("zero_optimization")) map_zero(*v, r.child("zero_optimization"), m);
  if (const json* v = r.find("bf16")) map_bf16(*v, r.child("bf16"), m);
  if (const json* v = r.find("fp16")) map_fp16(*v, r.child("fp16"));
  if (const json* v = r.find("optimizer")) map_optimizer(*v, r.child("optimizer"), m);
  if (const json* v = r.find("scheduler")) map_scheduler(*v, r.child("scheduler"), m);
  const json* batch = value_of(r, "train_batch_size");
  accept_harmless(r, {"steps_per_print", "wall_clock_breakdown", "memory_breakdown", "dump_state",
                      "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
                      "tensorboard", "wandb", "csv_monitor", "comms_logger", "flops_profiler"});
  r.finish();
  if (batch) {
    const std::int64_t want = global_batch(spec);
    if (as_integer(*batch, r.child("train_batch_size"), 1) != want) {
      std::ostringstream expected;
      expected << "micro_batch_size x grad_accum x num_workers = " << t.micro_batch_size << " x "
               << t.grad_accum << " x " << spec.scaling.num_workers << " = " << want;
      fail_value(r.child("train_batch_size"), *batch, expected.str());
    }
  }
}

}  // namespace cohort::config

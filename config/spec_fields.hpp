// The job spec's sections (model, data, scaling, train, zero, run, runtime_env, and the sections
// inside them: model.lora, run.checkpoint, run.failure), each written once as a list of its fields:
// the key, the struct member, the rule its values keep and, where they apply, the DeepSpeed key
// that sets the field, its name on the wire and how the writer treats it. Each list drives the
// parser (config/job_spec.cpp reads every field by its rule and refuses any other key), the
// canonical writer (config/job_spec_json.cpp), the wire and JSON views (actors/job_spec_fields.hpp's
// inspect), and the reference (tests/config/test_spec_docs.cpp checks that each field's row in
// docs/job-spec.md states the type, the default, the rule and the DeepSpeed key as rendered here,
// and that the docs' DeepSpeed table maps each key onto the field that names it). A field added to
// a section is added here, and nowhere else but its row in the docs. What depends on other fields
// (run.failure's timeouts in order, min_workers <= num_workers, use_gpu against the GPU resources,
// model.hf_dir against model.config) is checked after the list is read.
//
// The top level (the job's name, the workload, the sections) and the DeepSpeed block, whose keys
// map onto other sections' fields (config/deepspeed_mapping.cpp), have parsers of their own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"
#include "config/json_fields.hpp"
#include "config/s3_url.hpp"

namespace cohort::config {

// The names of each enum in the spec, in their order (also for the errors' lists).
inline const std::vector<std::pair<const char*, placement_strategy>> strategy_names = {
    {"PACK", placement_strategy::pack},
    {"SPREAD", placement_strategy::spread},
    {"STRICT_PACK", placement_strategy::strict_pack},
    {"STRICT_SPREAD", placement_strategy::strict_spread}};
inline const std::vector<std::pair<const char*, lr_schedule>> schedule_names = {
    {"constant", lr_schedule::constant}, {"cosine", lr_schedule::cosine}, {"linear", lr_schedule::linear}};
inline const std::vector<std::pair<const char*, precision>> precision_names = {{"fp32", precision::fp32},
                                                                               {"bf16", precision::bf16}};
inline const std::vector<std::pair<const char*, compute_path>> compute_path_names = {
    {"automatic", compute_path::automatic}, {"plain", compute_path::plain}, {"fused", compute_path::fused}};
inline const std::vector<std::pair<const char*, offload_device>> offload_names = {
    {"none", offload_device::none}, {"cpu", offload_device::cpu}};
inline const std::vector<std::pair<const char*, score_order>> order_names = {{"min", score_order::min},
                                                                             {"max", score_order::max}};
inline const std::vector<std::pair<const char*, workload_kind>> workload_names = {
    {"causal_lm", workload_kind::causal_lm},
    {"linear_regression", workload_kind::linear_regression},
    {"reward_model", workload_kind::reward_model}};

// ---- Rules: what values a field keeps ----

// An integer from lo to hi (inclusive); hi the type's largest when not given.
struct integer_rule {
  std::int64_t lo = 0;
  std::int64_t hi = std::numeric_limits<std::int64_t>::max();
};
// An unsigned 64-bit integer of at least `lo`; `why` follows the bound in a refusal.
struct unsigned_rule {
  std::uint64_t lo = 0;
  const char* why = "";
};
// true or false.
struct flag_rule {};
// A string ("" allowed when allow_empty); what it names is checked after the list is read.
struct string_rule {
  bool allow_empty = false;
};
// One of an enum's names (an optional<E> member: absent stays nullopt).
template <class E>
struct enum_rule {
  const std::vector<std::pair<const char*, E>>* names;
};
// A path on disk, a relative one taken from the spec's directory; or, where `s3` allows, an
// "s3://BUCKET[/PREFIX]" location, kept in its canonical form. "" only where allow_empty.
// `no_s3`: what a refusal of an S3 location adds. `as_written`: the fields that were paths
// before S3 locations were (run.local_dir, model.added_tokens, model.config) take any text as a
// path, an "s3://" one too, as they always have.
struct path_rule {
  bool s3 = false;
  bool allow_empty = false;
  const char* no_s3 = "";
  bool as_written = false;
};
// A non-empty list of names from names(), each once; required.
struct name_list_rule {
  const std::vector<std::string>& (*names)();
};
// A list of node names (nodes_spec.hpp's node_name_rule), each once; may be empty.
struct node_list_rule {};
// A list of strictly increasing steps >= 1; may be empty.
struct step_list_rule {};
// Resource quantities: an object of name -> number >= 0 (json_fields.hpp's resource_name_rule).
// `derived_default`: absent, the value is set after the list is read (from other fields).
struct resource_map_rule {
  bool derived_default = false;
};
// Environment variables for the worker processes: an object of name -> string that
// runtime_env_rules (job_spec.hpp) allows.
struct env_map_rule {};
// "" or an endpoint URL, http(s)://HOST[:PORT] (endpoint_form).
struct endpoint_rule {};
inline constexpr const char* endpoint_form = "http(s)://HOST[:PORT]";
// One of model.config's two forms, which the spec file gives under the one key "config": a
// config.json path (as path_rule's `as_written`) or an inline object (kept as its text). Each
// form reads the value when it has its type; a value of neither type is refused after the list
// is read. The wire carries the forms as two fields, under names of their own.
struct config_form_rule {
  bool inline_object = false;
};
// A section inside a section (model.lora, run.checkpoint, run.failure): an object read, written
// and inspected by its own list (section_fields).
struct section_rule {};
// A number: number_range (json_fields.hpp).

// How the canonical writer treats a field.
enum class writing {
  when_set,  // left out when it holds nothing: an empty path, an absent optional or section,
             // an empty node list, a model.config form not given
  always,    // written even when it holds nothing ("" names a default place)
  never,     // left out: the field belongs to a form of the section the spec does not take
};

template <class T, class Rule>
struct spec_field {
  const char* key;  // the spec file's key
  T& value;
  Rule rule;
  // The DeepSpeed key(s) that set the field, as docs/job-spec.md's "DeepSpeed key" column
  // writes them; nullptr: none maps onto it.
  const char* deepspeed = nullptr;
  const char* wire = nullptr;  // the field's name on the wire where it is not `key`
  bool wire_may_lack = false;  // JSON from older peers may lack it: it then keeps its default
  writing written = writing::when_set;

  const char* wire_name() const { return wire ? wire : key; }
  spec_field set_by_deepspeed(const char* text) const {
    spec_field f = *this;
    f.deepspeed = text;
    return f;
  }
  spec_field on_wire_as(const char* name) const {
    spec_field f = *this;
    f.wire = name;
    return f;
  }
  spec_field new_on_wire() const {
    spec_field f = *this;
    f.wire_may_lack = true;
    return f;
  }
  spec_field written_as(writing w) const {
    spec_field f = *this;
    f.written = w;
    return f;
  }
  // Written when `applies` (and it holds something), else never.
  spec_field written_if(bool applies) const {
    return written_as(applies ? writing::when_set : writing::never);
  }
};
template <class T, class Rule>
spec_field<T, Rule> field_of(const char* key, T& value, Rule rule) {
  return {key, value, rule};
}
template <class T, class E>
spec_field<T, enum_rule<E>> field_of(const char* key, T& value,
                                     const std::vector<std::pair<const char*, E>>& names) {
  return {key, value, enum_rule<E>{&names}};
}

// ---- The lists (Spec: the section's struct, const or not) ----

inline constexpr std::int64_t any_int = std::numeric_limits<int>::max();  // an int field's top
// run.failure's timeouts, scaling.resize_interval_s, run.memory_status_every_s: at most a day.
inline constexpr double max_timeout_s = 86400;
inline constexpr std::int64_t max_workers = 65536;  // scaling.num_workers

// clang-format off: one field a line, as a table
template <class Spec>
auto train_fields(Spec& t) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, train_spec>);
  return std::make_tuple(
      field_of("seq_len", t.seq_len, integer_rule{1, max_seq_len}),
      field_of("micro_batch_size", t.micro_batch_size, integer_rule{1, max_micro_batch_size})
          .set_by_deepspeed("`train_micro_batch_size_per_gpu`"),
      field_of("grad_accum", t.grad_accum, integer_rule{1, max_grad_accum})
          .set_by_deepspeed("`gradient_accumulation_steps`"),
      field_of("epochs", t.epochs, integer_rule{0, any_int}),
      field_of("max_steps", t.max_steps, integer_rule{0})
          .set_by_deepspeed("`scheduler.params.total_num_steps` (WarmupDecayLR, WarmupCosineLR)"),
      field_of("as_test", t.as_test, flag_rule{}),
      field_of("lr", t.lr, positive)
          .set_by_deepspeed(
              "`optimizer.params.lr`; `scheduler.params.warmup_max_lr` (WarmupLR, WarmupDecayLR)"),
      field_of("beta1", t.beta1, unit_open).set_by_deepspeed("`optimizer.params.betas[0]`"),
      field_of("beta2", t.beta2, unit_open).set_by_deepspeed("`optimizer.params.betas[1]`"),
      field_of("eps", t.eps, positive).set_by_deepspeed("`optimizer.params.eps`"),
      field_of("warmup_steps", t.warmup_steps, integer_rule{0, any_int})
          .set_by_deepspeed("`scheduler.params.warmup_num_steps`"),
      field_of("schedule", t.schedule, schedule_names)
          .set_by_deepspeed(
              "`scheduler.type`: WarmupLR → constant, WarmupDecayLR → linear, WarmupCosineLR → cosine"),
      field_of("min_lr_ratio", t.min_lr_ratio, unit_closed)
          .set_by_deepspeed("`scheduler.params.cos_min_ratio` (WarmupCosineLR)"),
      field_of("weight_decay", t.weight_decay, non_negative)
          .set_by_deepspeed("`optimizer.params.weight_decay`"),
      field_of("grad_clip", t.grad_clip, non_negative).set_by_deepspeed("`gradient_clipping`"),
      field_of("precision", t.dtype, precision_names)
          .set_by_deepspeed("`bf16.enabled` (true → bf16, false → fp32)"),
      field_of("seed", t.seed, unsigned_rule{}), field_of("log_every", t.log_every, integer_rule{1, any_int}),
      field_of("activation_checkpointing", t.activation_checkpointing, flag_rule{}),
      field_of("compute_path", t.path, compute_path_names),
      field_of("loss_chunk_tokens", t.loss_chunk_tokens, integer_rule{0}),
      field_of("deterministic", t.deterministic, flag_rule{}),
      field_of("cuda_graph", t.cuda_graph, flag_rule{}),
      field_of("step_delay_s", t.step_delay_s, non_negative),
      field_of("eval_every", t.eval_every, integer_rule{0}));
}

template <class Spec>
auto zero_fields(Spec& z) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, zero_spec>);
  return std::make_tuple(
      field_of("stage", z.stage, integer_rule{0, 3}).set_by_deepspeed("`zero_optimization.stage`"),
      field_of("offload_optimizer", z.offload_optimizer, offload_names)
          .set_by_deepspeed("`zero_optimization.offload_optimizer.device`"),
      field_of("offload_param", z.offload_param, offload_names)
          .set_by_deepspeed("`zero_optimization.offload_param.device`"),
      field_of("delayed_param_update", z.delayed_param_update, flag_rule{}),
      field_of("layers_kept_gathered", z.layers_kept_gathered, integer_rule{0}));
}

template <class Spec>
auto checkpoint_fields(Spec& c) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, checkpoint_spec>);
  return std::make_tuple(field_of("every_steps", c.every_steps, integer_rule{0, any_int}),
                         field_of("final", c.final, flag_rule{}),
                         field_of("num_to_keep", c.num_to_keep, integer_rule{0, any_int}),
                         field_of("score_attribute", c.score_attribute, string_rule{true}),
                         field_of("score_order", c.order, order_names),
                         field_of("async", c.async, flag_rule{}),
                         field_of("staging_bytes", c.staging_bytes, integer_rule{0}),
                         field_of("replicate", c.replicate, flag_rule{}),
                         field_of("replicate_every", c.replicate_every, integer_rule{0, any_int}),
                         field_of("export_every", c.export_every, integer_rule{0, any_int}),
                         field_of("num_exports_to_keep", c.num_exports_to_keep, integer_rule{0, any_int}));
}

template <class Spec>
auto failure_fields(Spec& f) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, failure_spec>);
  const number_range seconds{1.0, true, max_timeout_s, true};  // [1, 1 day]
  return std::make_tuple(
      field_of("max_failures", f.max_failures, integer_rule{-1, any_int}),
      field_of("hang_timeout_s", f.hang_timeout_s, seconds),
      field_of("startup_timeout_s", f.startup_timeout_s, seconds),
      field_of("collective_timeout_s", f.collective_timeout_s, seconds),
      field_of("preemption_grace_s", f.preemption_grace_s, number_range{0.0, true, max_timeout_s, true}),
      field_of("max_preemptions", f.max_preemptions, integer_rule{-1, any_int}),
      field_of("checkpoint_timeout_s", f.checkpoint_timeout_s, seconds));
}
template <class Spec>
auto data_fields(Spec& d) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, data_spec>);
  return std::make_tuple(
      field_of("train", d.train, path_rule{true, false}),
      field_of("eval", d.eval, path_rule{false, false, " (only data.train may be in S3)"}),
      field_of("cache_dir", d.cache_dir, path_rule{false, true}),
      field_of("cache_bytes", d.cache_bytes,
               unsigned_rule{std::uint64_t{1} << 20, " (1 MiB), and at least the largest shard"}),
      field_of("verify", d.verify, flag_rule{}));
}

// model.lora (its presence sets `enabled`, which is not a key).
template <class Spec>
auto lora_fields(Spec& l) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, lora_spec>);
  return std::make_tuple(field_of("r", l.r, integer_rule{1, 65536}), field_of("alpha", l.alpha, positive),
                         field_of("dropout", l.dropout, unit_open),
                         field_of("target_modules", l.target_modules, name_list_rule{&lora_module_names}),
                         field_of("base_dtype", l.base_dtype, precision_names));
}

// model: a fine-tune's hf_dir, or a pretrain's config (a path or an inline object) and init_seed;
// lora, added_tokens and pad_vocab_to_multiple_of need hf_dir. Which form a spec takes is
// checked after the list is read; the writer writes each field only in its form (the `written`
// below are taken from the values the list is built over).
template <class Spec>
auto model_fields(Spec& m) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, model_spec>);
  const bool fine_tune = !m.hf_dir.empty();
  const bool pretrain = !fine_tune && (!m.config_file.empty() || !m.inline_config_json.empty());
  return std::make_tuple(
      field_of("hf_dir", m.hf_dir, path_rule{true}),
      field_of("config", m.config_file, config_form_rule{false})
          .on_wire_as("config_file")
          .written_if(!fine_tune),
      field_of("config", m.inline_config_json, config_form_rule{true})
          .on_wire_as("inline_config")
          .written_if(!fine_tune),
      field_of("init_seed", m.init_seed, unsigned_rule{}).written_if(pretrain),
      field_of("lora", m.lora, section_rule{}).written_if(fine_tune),
      field_of("added_tokens", m.added_tokens, path_rule{false, false, "", true}).written_if(fine_tune),
      field_of("pad_vocab_to_multiple_of", m.pad_vocab_to_multiple_of, integer_rule{1, 65536})
          .written_if(fine_tune && m.pad_vocab_to_multiple_of != 1));
}

// scaling: resources_per_worker's default follows use_gpu; the fields that must agree with each
// other are checked after the list is read.
template <class Spec>
auto scaling_fields(Spec& s) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, scaling_spec>);
  return std::make_tuple(
      field_of("num_workers", s.num_workers, integer_rule{1, max_workers}),
      field_of("min_workers", s.min_workers, integer_rule{0, max_workers}),
      field_of("resize_interval_s", s.resize_interval_s, number_range{0.0, true, max_timeout_s, true})
          .new_on_wire(),
      field_of("use_gpu", s.use_gpu, flag_rule{}),
      field_of("resources_per_worker", s.resources_per_worker, resource_map_rule{true}),
      field_of("trainer_resources", s.trainer_resources, resource_map_rule{}),
      field_of("placement_strategy", s.strategy, strategy_names),
      field_of("nodes", s.nodes, node_list_rule{}),
      field_of("bind_cores_to_rank", s.bind_cores_to_rank, flag_rule{}).new_on_wire());
}

// run: its own fields and its sections; the checkpoint and failure fields that depend on each
// other are checked after the list is read.
template <class Spec>
auto run_fields(Spec& r) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, run_spec>);
  return std::make_tuple(
      field_of("storage_path", r.storage_path, path_rule{true}).written_as(writing::always),
      field_of("s3_endpoint", r.s3_endpoint, endpoint_rule{}),
      field_of("local_dir", r.local_dir, path_rule{false, true, "", true}).written_as(writing::always),
      field_of("checkpoint", r.checkpoint, section_rule{}), field_of("failure", r.failure, section_rule{}),
      field_of("resume", r.resume, flag_rule{}),
      field_of("hold_before_step", r.hold_before_step, integer_rule{0}),
      field_of("hold_before_steps", r.hold_before_steps, step_list_rule{}),
      field_of("sample_log", r.sample_log, flag_rule{}),
      field_of("profile_steps", r.profile_steps, step_list_rule{}).new_on_wire(),
      field_of("memory_status_every_s", r.memory_status_every_s,
               number_range{0.0, true, max_timeout_s, true}));
}

template <class Spec>
auto runtime_env_fields(Spec& e) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, runtime_env_spec>);
  return std::make_tuple(field_of("env_vars", e.env_vars, env_map_rule{}));
}
// clang-format on

// The list of a section that is a field of another (section_rule).
template <class Spec>
auto section_fields(Spec& x) {
  using S = std::remove_const_t<Spec>;
  if constexpr (std::is_same_v<S, lora_spec>)
    return lora_fields(x);
  else if constexpr (std::is_same_v<S, checkpoint_spec>)
    return checkpoint_fields(x);
  else
    return failure_fields(x);
}
// Whether a section field stands for nothing: model.lora when not given (its presence is
// `enabled`); run's sections always hold their fields.
inline bool section_absent(const lora_spec& l) { return !l.enabled; }
inline bool section_absent(const checkpoint_spec&) { return false; }
inline bool section_absent(const failure_spec&) { return false; }
inline void mark_given(lora_spec& l) { l.enabled = true; }
inline void mark_given(checkpoint_spec&) {}
inline void mark_given(failure_spec&) {}

// ---- What the lists drive ----

// A path of the spec, a relative one taken from `base_dir` (the JOB.json's directory).
inline std::string resolved_path(const std::string& base_dir, const std::string& p) {
  if (p.empty() || std::filesystem::path(p).is_absolute() || base_dir.empty() || base_dir == ".") return p;
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

// An s3:// location of field `field` in its canonical form; spec_error naming the field when bad.
inline std::string canonical_s3_url(const std::string& text, const std::string& field) {
  try {
    return parse_s3_url(text, field).text();
  } catch (const std::invalid_argument& e) {  // "<field>: <why>"
    throw spec_error(field, std::string(e.what()).substr(field.size() + 2));
  }
}

// A path field's value as `rule` keeps it: an "s3://" location in its canonical form where the
// rule allows one (refused, naming `field`, where it does not), else a path taken from `base_dir`.
inline std::string path_value(const std::string& value, const std::string& field, const std::string& base_dir,
                              const path_rule& rule) {
  if (rule.as_written || !is_s3_url(value)) return resolved_path(base_dir, value);
  if (!rule.s3)
    throw spec_error(field, "\"" + value + "\": a path on disk, not in S3" + rule.no_s3 +
                                "; give a directory every node sees");
  return canonical_s3_url(value, field);
}

template <class Fields>
void read_fields(object_reader& r, const Fields& fields, const std::string& base_dir = "");
template <class Fields>
void check_required(const std::string& section, const Fields& fields);
template <class Fields>
nlohmann::json fields_json(const Fields& fields);

namespace detail {

template <class T>
void read_field(object_reader& r, const spec_field<T, integer_rule>& f) {
  if constexpr (std::is_same_v<T, int>) {
    r.read(f.key, f.value, f.rule.lo, f.rule.hi);
  } else {
    static_assert(std::is_same_v<T, std::int64_t>);
    r.read(f.key, f.value, f.rule.lo);
  }
}
inline void read_field(object_reader& r, const spec_field<std::uint64_t, unsigned_rule>& f) {
  if (r.read(f.key, f.value) && f.value < f.rule.lo)
    throw spec_error(r.child(f.key), "got " + std::to_string(f.value) + "; expected at least " +
                                         std::to_string(f.rule.lo) + f.rule.why);
}
template <class E>
void read_field(object_reader& r, const spec_field<std::optional<E>, enum_rule<E>>& f) {
  E value{};
  if (r.read_enum(f.key, value, *f.rule.names)) f.value = value;
}
inline void read_field(object_reader& r, const spec_field<std::string, path_rule>& f,
                       const std::string& base_dir) {
  if (r.read(f.key, f.value, f.rule.allow_empty)) f.value = path_value(f.value, r.child(f.key), base_dir, f.rule);
}
inline std::string names_text(const name_list_rule& rule) {
  std::string allowed;
  for (const auto& name : rule.names()) allowed += (allowed.empty() ? "" : ", ") + name;
  return allowed;
}
// An absent list is left empty here; check_required refuses it once the object's keys are known.
inline void read_field(object_reader& r, const spec_field<std::vector<std::string>, name_list_rule>& f) {
  const std::string path = r.child(f.key);
  const auto& names = f.rule.names();
  const std::string allowed = names_text(f.rule);
  const nlohmann::json* given = r.find(f.key);
  if (!given) return;
  if (!given->is_array() || given->empty())
    fail_value(path, *given, "a non-empty list of module names (" + allowed + ")");
  f.value.clear();
  for (std::size_t i = 0; i < given->size(); ++i) {
    const std::string item = join_path(path, "[" + std::to_string(i) + "]");
    const std::string name = as_string((*given)[i], item);
    if (std::find(names.begin(), names.end(), name) == names.end())
      fail_value(item, (*given)[i], "a module name peft uses: " + allowed);
    if (std::find(f.value.begin(), f.value.end(), name) != f.value.end())
      fail_value(item, (*given)[i], "each module name once");
    f.value.push_back(name);
  }
}
inline void read_field(object_reader& r, const spec_field<bool, flag_rule>& f) { r.read(f.key, f.value); }
inline void read_field(object_reader& r, const spec_field<std::string, string_rule>& f) {
  r.read(f.key, f.value, f.rule.allow_empty);
}
inline void read_field(object_reader& r, const spec_field<double, number_range>& f) {
  r.read(f.key, f.value, f.rule);
}
template <class E>
void read_field(object_reader& r, const spec_field<E, enum_rule<E>>& f) {
  r.read_enum(f.key, f.value, *f.rule.names);
}
inline void read_field(object_reader& r, const spec_field<resource_quantities, resource_map_rule>& f) {
  r.read(f.key, f.value);
}
// The rules whose reading is longer (config/spec_fields.cpp).
void read_field(object_reader& r, const spec_field<std::vector<std::string>, node_list_rule>& f);
void read_field(object_reader& r, const spec_field<std::vector<std::int64_t>, step_list_rule>& f);
void read_field(object_reader& r, const spec_field<std::map<std::string, std::string>, env_map_rule>& f);
void read_field(object_reader& r, const spec_field<std::string, endpoint_rule>& f);

inline void read_field(object_reader& r, const spec_field<std::string, config_form_rule>& f,
                       const std::string& base_dir) {
  const nlohmann::json* given = r.find(f.key);
  if (!given) return;
  if (f.rule.inline_object && given->is_object())
    f.value = given->dump();
  else if (!f.rule.inline_object && given->is_string())
    f.value = resolved_path(base_dir, as_string(*given, r.child(f.key)));
}
// A section: its object read by its own list, unknown keys refused, its required fields checked.
template <class Section>
void read_field(object_reader& r, const spec_field<Section, section_rule>& f, const std::string& base_dir) {
  const nlohmann::json* given = r.find(f.key);
  if (!given) return;
  object_reader section(*given, r.child(f.key));
  mark_given(f.value);
  read_fields(section, section_fields(f.value), base_dir);
  section.finish();
  check_required(section.path(), section_fields(f.value));
}

// Fields without paths read the same whatever the spec's directory.
template <class T, class Rule>
void read_field(object_reader& r, const spec_field<T, Rule>& f, const std::string&) {
  read_field(r, f);
}

// Whether the writer leaves the field out (`writing`): an empty path, an absent optional or
// section, an empty node list or a model.config form not given holds nothing (the parser refuses
// the one, reads the others as absent).
template <class T, class Rule>
bool left_out(const spec_field<T, Rule>& f) {
  if (f.written != writing::when_set) return f.written == writing::never;
  if constexpr (std::is_same_v<Rule, path_rule> || std::is_same_v<Rule, config_form_rule> ||
                std::is_same_v<Rule, node_list_rule>)
    return f.value.empty();
  else if constexpr (std::is_same_v<Rule, section_rule>)
    return section_absent(f.value);
  else if constexpr (std::is_same_v<std::remove_const_t<T>, std::optional<precision>>)
    return !f.value.has_value();
  else
    return false;
}

template <class T, class Rule>
nlohmann::json json_of(const spec_field<T, Rule>& f) {
  using V = std::remove_const_t<T>;
  if constexpr (std::is_enum_v<V>)
    return to_string(f.value);
  else if constexpr (std::is_same_v<V, std::optional<precision>>)
    return f.value ? nlohmann::json(to_string(*f.value)) : nlohmann::json();
  else if constexpr (std::is_same_v<Rule, section_rule>)
    return fields_json(section_fields(f.value));
  else if constexpr (std::is_same_v<Rule, config_form_rule>)
    return f.rule.inline_object ? nlohmann::json::parse(f.value) : nlohmann::json(f.value);
  else
    return f.value;
}

}  // namespace detail

// Reads every field of `fields` present in `r`'s object, each by its rule (spec_error naming the
// field when its value breaks it), paths taken from `base_dir`. Does not call r.finish().
template <class Fields>
void read_fields(object_reader& r, const Fields& fields, const std::string& base_dir) {
  std::apply([&](const auto&... f) { (detail::read_field(r, f, base_dir), ...); }, fields);
}

// For a section whose refusals keep an order of their own (value errors of some fields, unknown
// keys, checks across fields, then the values of others): registers every key of `fields` with
// `r`, so that r.finish() knows them all before they are read, in the list's order.
template <class Fields>
void register_keys(object_reader& r, const Fields& fields) {
  std::apply([&](const auto&... f) { (static_cast<void>(r.find(f.key)), ...); }, fields);
}
// Which fields read_fields_of reads: those `keys` names, or all the others.
enum class selecting { named, others };
// As read_fields, for the fields of `fields` that `keys` and `which` select, in the list's order.
template <class Fields>
void read_fields_of(object_reader& r, const Fields& fields, const std::string& base_dir,
                    const std::vector<std::string_view>& keys, selecting which = selecting::named) {
  const auto read = [&](const auto& f) {
    const bool named = std::find(keys.begin(), keys.end(), f.key) != keys.end();
    if (named == (which == selecting::named)) detail::read_field(r, f, base_dir);
  };
  std::apply([&](const auto&... f) { (read(f), ...); }, fields);
}

// After read_fields and the object's finish(): spec_error naming the first required field of
// `fields` (a name list) that `section`'s object did not give.
template <class Fields>
void check_required(const std::string& section, const Fields& fields) {
  const auto check = [&](const auto& f) {
    using R = std::decay_t<decltype(f.rule)>;
    if constexpr (std::is_same_v<R, name_list_rule>)
      if (f.value.empty())
        throw spec_error(join_path(section, f.key), "missing; expected a non-empty list of module names (" +
                                                        detail::names_text(f.rule) + ")");
  };
  std::apply([&](const auto&... f) { (check(f), ...); }, fields);
}

// Every field of `fields` as a JSON object, enums by their names, sections as objects; without
// the fields the writer leaves out (spec_field's `written`).
template <class Fields>
nlohmann::json fields_json(const Fields& fields) {
  nlohmann::json out = nlohmann::json::object();
  const auto put = [&](const auto& f) {
    if (!detail::left_out(f)) out[f.key] = detail::json_of(f);
  };
  std::apply([&](const auto&... f) { (put(f), ...); }, fields);
  return out;
}

// Calls visit(field) for each field (a spec_field), in order (the docs check).
template <class Fields, class Visit>
void for_each_field(const Fields& fields, Visit&& visit) {
  std::apply([&](const auto&... f) { (visit(f), ...); }, fields);
}

}  // namespace cohort::config

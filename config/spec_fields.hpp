// The job spec's flat sections (train, zero, data, model.lora, run.checkpoint, run.failure), each
// written once as a list of its fields: the key, the struct member, and the rule its values keep. Each list
// drives the parser (config/job_spec.cpp reads every field by its rule and refuses any other key), the
// canonical writer (config/job_spec_json.cpp), the wire and JSON views (actors/job_spec_fields.hpp's
// inspect), and the reference (tests/config/test_spec_docs.cpp checks that each field's row in
// docs/job-spec.md states the type, the default and the rule as rendered here). A field added to
// one of these sections is added here, and nowhere else but its row in the docs. What depends on
// other fields (e.g. run.failure's timeouts in order) is checked after the list is read.
//
// The sections with choices between forms and free-form maps (model's own fields, scaling, run's
// own fields, runtime_env, the DeepSpeed block) have parsers of their own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
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
// `no_s3`: what a refusal of an S3 location adds.
struct path_rule {
  bool s3 = false;
  bool allow_empty = false;
  const char* no_s3 = "";
};
// A non-empty list of names from names(), each once; required.
struct name_list_rule {
  const std::vector<std::string>& (*names)();
};
// A number: number_range (json_fields.hpp).

template <class T, class Rule>
struct spec_field {
  const char* key;
  T& value;
  Rule rule;
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
// run.failure's timeouts: at most a day.
inline constexpr double max_timeout_s = 86400;

// clang-format off: one field a line, as a table
template <class Spec>
auto train_fields(Spec& t) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, train_spec>);
  return std::make_tuple(
      field_of("seq_len", t.seq_len, integer_rule{1, max_seq_len}),
      field_of("micro_batch_size", t.micro_batch_size, integer_rule{1, max_micro_batch_size}),
      field_of("grad_accum", t.grad_accum, integer_rule{1, max_grad_accum}),
      field_of("epochs", t.epochs, integer_rule{0, any_int}),
      field_of("max_steps", t.max_steps, integer_rule{0}), field_of("as_test", t.as_test, flag_rule{}),
      field_of("lr", t.lr, positive), field_of("beta1", t.beta1, unit_open),
      field_of("beta2", t.beta2, unit_open), field_of("eps", t.eps, positive),
      field_of("warmup_steps", t.warmup_steps, integer_rule{0, any_int}),
      field_of("schedule", t.schedule, schedule_names), field_of("min_lr_ratio", t.min_lr_ratio, unit_closed),
      field_of("weight_decay", t.weight_decay, non_negative),
      field_of("grad_clip", t.grad_clip, non_negative), field_of("precision", t.dtype, precision_names),
      field_of("seed", t.seed, unsigned_rule{}), field_of("log_every", t.log_every, integer_rule{1, any_int}),
      field_of("activation_checkpointing", t.activation_checkpointing, flag_rule{}),
      field_of("compute_path", t.path, compute_path_names),
      field_of("loss_chunk_tokens", t.loss_chunk_tokens, integer_rule{0}),
      field_of("deterministic", t.deterministic, flag_rule{}),
      field_of("step_delay_s", t.step_delay_s, non_negative),
      field_of("eval_every", t.eval_every, integer_rule{0}));
}

template <class Spec>
auto zero_fields(Spec& z) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, zero_spec>);
  return std::make_tuple(field_of("stage", z.stage, integer_rule{0, 3}),
                         field_of("offload_optimizer", z.offload_optimizer, offload_names),
                         field_of("offload_param", z.offload_param, offload_names),
                         field_of("delayed_param_update", z.delayed_param_update, flag_rule{}));
}

template <class Spec>
auto checkpoint_fields(Spec& c) {
  static_assert(std::is_same_v<std::remove_const_t<Spec>, checkpoint_spec>);
  return std::make_tuple(field_of("every_steps", c.every_steps, integer_rule{0, any_int}),
                         field_of("num_to_keep", c.num_to_keep, integer_rule{0, any_int}),
                         field_of("score_attribute", c.score_attribute, string_rule{true}),
                         field_of("score_order", c.order, order_names),
                         field_of("async", c.async, flag_rule{}),
                         field_of("staging_bytes", c.staging_bytes, integer_rule{0}),
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
// clang-format on

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
  if (!is_s3_url(value)) return resolved_path(base_dir, value);
  if (!rule.s3)
    throw spec_error(field, "\"" + value + "\": a path on disk, not in S3" + rule.no_s3 +
                                "; give a directory every node sees");
  return canonical_s3_url(value, field);
}

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

// Fields without paths read the same whatever the spec's directory.
template <class T, class Rule>
void read_field(object_reader& r, const spec_field<T, Rule>& f, const std::string&) {
  read_field(r, f);
}

// An empty path or an absent optional: not written (the parser refuses the one, reads the other
// as absent).
template <class T, class Rule>
bool holds_nothing(const spec_field<T, Rule>& f) {
  if constexpr (std::is_same_v<Rule, path_rule>)
    return f.value.empty();
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
  else
    return f.value;
}

}  // namespace detail

// Reads every field of `fields` present in `r`'s object, each by its rule (spec_error naming the
// field when its value breaks it), paths taken from `base_dir`. Does not call r.finish().
template <class Fields>
void read_fields(object_reader& r, const Fields& fields, const std::string& base_dir = "") {
  std::apply([&](const auto&... f) { (detail::read_field(r, f, base_dir), ...); }, fields);
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

// Every field of `fields` as a JSON object, enums by their names; without the fields that hold
// nothing (an empty path, an absent optional), which the parser would refuse or take as absent.
template <class Fields>
nlohmann::json fields_json(const Fields& fields) {
  nlohmann::json out = nlohmann::json::object();
  const auto put = [&](const auto& f) {
    if (!detail::holds_nothing(f)) out[f.key] = detail::json_of(f);
  };
  std::apply([&](const auto&... f) { (put(f), ...); }, fields);
  return out;
}

// Calls visit(key, member, rule) for each field, in order (the docs check and the wire's inspect).
template <class Fields, class Visit>
void for_each_field(const Fields& fields, Visit&& visit) {
  std::apply([&](const auto&... f) { (visit(f.key, f.value, f.rule), ...); }, fields);
}

}  // namespace cohort::config

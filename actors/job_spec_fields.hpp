// The parsed job spec's field list (config/job_spec.hpp), so that the spec travels as its typed
// message: head → node in trainer_setup, trainer → node in worker_setup, node → worker process in
// the setup file. One inspect per struct drives CAF, the msgpack wire and the JSON view (the names
// are the spec file's keys, so a decode error reads `worker_setup.spec.train.lr: expected a
// number ...`). The spec is parsed and validated once, where its text arrives (the head, from a
// client or the store); what travels after that is taken as the head validated it. These live in
// cohort::config (for ADL) but here, since config/ knows neither CAF nor the wire.
// The flat sections (train, zero, data, model.lora, run.checkpoint, run.failure) take their fields from their
// lists in config/spec_fields.hpp, which the parser and the writer read too; a field added to another section
// must be added here, under its spec key: tests/actors/job_spec_fields_test.cpp checks that a spec with every
// field set off its default sets every field named here, that every key of the canonical text (and of
// docs/job-spec.md's tables) is a field named here, and compares the canonical text after the trip.
#pragma once

#include <caf/meta/type_name.hpp>

#include <tuple>
#include <type_traits>
#include <utility>

#include "config/job_spec.hpp"
#include "config/spec_fields.hpp"
#include "net/field_name.hpp"

namespace cohort::config {

// The largest value of each enum, for the wire's range check (net/wire_message.hpp).
constexpr placement_strategy wire_enum_max(placement_strategy) { return placement_strategy::strict_spread; }
constexpr lr_schedule wire_enum_max(lr_schedule) { return lr_schedule::linear; }
constexpr precision wire_enum_max(precision) { return precision::bf16; }
constexpr compute_path wire_enum_max(compute_path) { return compute_path::fused; }
constexpr offload_device wire_enum_max(offload_device) { return offload_device::cpu; }
constexpr score_order wire_enum_max(score_order) { return score_order::max; }
constexpr workload_kind wire_enum_max(workload_kind) { return workload_kind::reward_model; }

// The flat sections' inspect: their field lists (config/spec_fields.hpp), each field after its name.
template <class Inspector, class Fields>
typename Inspector::result_type inspect_fields(Inspector& f, const char* type, const Fields& fields) {
  auto named = std::apply(
      [](const auto&... x) {
        return std::tuple_cat(std::tuple<net::field_name_t, std::remove_reference_t<decltype(x.value)>&>(
            net::field(x.key), x.value)...);
      },
      fields);
  return std::apply([&](auto&... xs) { return f(caf::meta::type_name(type), xs...); }, named);
}

// model.lora: whether it is there, then its field list.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, lora_spec& x) {
  return inspect_fields(
      f, "lora_spec",
      std::tuple_cat(std::make_tuple(field_of("enabled", x.enabled, flag_rule{})), lora_fields(x)));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_spec& x) {
  using net::field;
  return f(caf::meta::type_name("model_spec"), field("hf_dir"), x.hf_dir, field("config_file"),
           x.config_file, field("inline_config"), x.inline_config_json, field("init_seed"),
           x.init_seed, field("lora"), x.lora, field("added_tokens"), x.added_tokens,
           field("pad_vocab_to_multiple_of"), x.pad_vocab_to_multiple_of);
}

// The sections the wire reads by their field lists alone, and their wire names.
inline auto listed_fields(train_spec& x) { return train_fields(x); }
inline auto listed_fields(zero_spec& x) { return zero_fields(x); }
inline auto listed_fields(data_spec& x) { return data_fields(x); }
inline auto listed_fields(checkpoint_spec& x) { return checkpoint_fields(x); }
inline auto listed_fields(failure_spec& x) { return failure_fields(x); }
inline const char* listed_name(const train_spec&) { return "train_spec"; }
inline const char* listed_name(const zero_spec&) { return "zero_spec"; }
inline const char* listed_name(const data_spec&) { return "data_spec"; }
inline const char* listed_name(const checkpoint_spec&) { return "checkpoint_spec"; }
inline const char* listed_name(const failure_spec&) { return "failure_spec"; }

template <class Inspector, class Spec, class = decltype(listed_fields(std::declval<Spec&>()))>
typename Inspector::result_type inspect(Inspector& f, Spec& x) {
  return inspect_fields(f, listed_name(x), listed_fields(x));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scaling_spec& x) {
  using net::field;
  return f(caf::meta::type_name("scaling_spec"), field("num_workers"), x.num_workers, field("min_workers"),
           x.min_workers, net::field_or_default("resize_interval_s"), x.resize_interval_s, field("use_gpu"),
           x.use_gpu, field("resources_per_worker"), x.resources_per_worker, field("trainer_resources"),
           x.trainer_resources, field("placement_strategy"), x.strategy, field("nodes"), x.nodes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_spec& x) {
  using net::field;
  return f(caf::meta::type_name("run_spec"), field("storage_path"), x.storage_path,
           field("s3_endpoint"), x.s3_endpoint, field("local_dir"), x.local_dir,
           field("checkpoint"), x.checkpoint, field("failure"), x.failure, field("resume"),
           x.resume, field("hold_before_step"), x.hold_before_step, field("hold_before_steps"),
           x.hold_before_steps, field("sample_log"), x.sample_log, field("memory_status_every_s"),
           x.memory_status_every_s);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, runtime_env_spec& x) {
  using net::field;
  return f(caf::meta::type_name("runtime_env_spec"), field("env_vars"), x.env_vars);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_spec& x) {
  using net::field;
  return f(caf::meta::type_name("job_spec"), field("name"), x.name, field("workload"), x.workload,
           field("model"), x.model, field("data"), x.data, field("scaling"), x.scaling,
           field("train"), x.train, field("zero"), x.zero, field("run"), x.run,
           field("runtime_env"), x.runtime_env);
}

}  // namespace cohort::config

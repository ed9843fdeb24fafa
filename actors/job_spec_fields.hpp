// The parsed job spec's field list (config/job_spec.hpp), so that the spec travels as its typed
// message: head → node in trainer_setup, trainer → node in worker_setup, node → worker process in
// the setup file. One inspect per struct drives CAF, the msgpack wire and the JSON view (the names
// are the spec file's keys, so a decode error reads `worker_setup.spec.train.lr: expected a
// number ...`). The spec is parsed and validated once, where its text arrives (the head, from a
// client or the store); what travels after that is taken as the head validated it. These live in
// cohort::config (for ADL) but here, since config/ knows neither CAF nor the wire.
// Every section takes its fields from its list in config/spec_fields.hpp, which the parser and the
// writer read too, each field under its wire name (the spec key, but for model.config's two forms,
// "config_file" and "inline_config"); the job_spec itself lists its sections here.
// tests/actors/job_spec_fields_test.cpp checks that a spec with every field set off its default sets
// every field named here, that every key of the canonical text (and of docs/job-spec.md's tables)
// is a field named here, and compares the canonical text after the trip.
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

// A section's inspect: its field list (config/spec_fields.hpp), each field after its wire name;
// a field that older peers may not send reads as its default when absent.
template <class Inspector, class Fields>
typename Inspector::result_type inspect_fields(Inspector& f, const char* type, const Fields& fields) {
  auto named = std::apply(
      [](const auto&... x) {
        return std::tuple_cat(std::tuple<net::field_name_t, std::remove_reference_t<decltype(x.value)>&>(
            net::field_name_t(x.wire_name(), x.wire_may_lack ? net::field_presence::defaulted
                                                             : net::field_presence::required),
            x.value)...);
      },
      fields);
  return std::apply([&](auto&... xs) { return f(caf::meta::type_name(type), xs...); }, named);
}

// The sections the wire reads by their field lists, and their wire names. model.lora on the wire
// says first whether it is there (`enabled`, which the spec file says by giving the section).
inline auto listed_fields(model_spec& x) { return model_fields(x); }
inline auto listed_fields(lora_spec& x) {
  return std::tuple_cat(std::make_tuple(field_of("enabled", x.enabled, flag_rule{})), lora_fields(x));
}
inline auto listed_fields(data_spec& x) { return data_fields(x); }
inline auto listed_fields(scaling_spec& x) { return scaling_fields(x); }
inline auto listed_fields(train_spec& x) { return train_fields(x); }
inline auto listed_fields(zero_spec& x) { return zero_fields(x); }
inline auto listed_fields(run_spec& x) { return run_fields(x); }
inline auto listed_fields(checkpoint_spec& x) { return checkpoint_fields(x); }
inline auto listed_fields(failure_spec& x) { return failure_fields(x); }
inline auto listed_fields(runtime_env_spec& x) { return runtime_env_fields(x); }
inline const char* listed_name(const model_spec&) { return "model_spec"; }
inline const char* listed_name(const lora_spec&) { return "lora_spec"; }
inline const char* listed_name(const data_spec&) { return "data_spec"; }
inline const char* listed_name(const scaling_spec&) { return "scaling_spec"; }
inline const char* listed_name(const train_spec&) { return "train_spec"; }
inline const char* listed_name(const zero_spec&) { return "zero_spec"; }
inline const char* listed_name(const run_spec&) { return "run_spec"; }
inline const char* listed_name(const checkpoint_spec&) { return "checkpoint_spec"; }
inline const char* listed_name(const failure_spec&) { return "failure_spec"; }
inline const char* listed_name(const runtime_env_spec&) { return "runtime_env_spec"; }

template <class Inspector, class Spec, class = decltype(listed_fields(std::declval<Spec&>()))>
typename Inspector::result_type inspect(Inspector& f, Spec& x) {
  return inspect_fields(f, listed_name(x), listed_fields(x));
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

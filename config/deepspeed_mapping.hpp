// Maps a DeepSpeed config (the job spec's "deepspeed" block) onto cohort's job_spec fields. Only
// what cohort honours is accepted; anything else is a spec_error naming the DeepSpeed key.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"

namespace cohort::config {

// ds is the DeepSpeed object, path its JSON path ("deepspeed"). given maps each cohort field path
// set explicitly so far ("train.lr") to where it was set; a DeepSpeed value that differs from an
// explicit one is a conflict error. "auto" values leave cohort's value. Updates spec and given.
void apply_deepspeed(const nlohmann::json& ds, const std::string& path, job_spec& spec,
                     std::map<std::string, std::string>& given);

}  // namespace cohort::config

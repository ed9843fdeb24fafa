// Job records (and node records) as JSON: what `submit status --json` / `submit list --json`
// print and what the head keeps in the cluster store's state.json. from_json throws std::invalid_argument naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include "actors/messages.hpp"

namespace cohort::actors {

nlohmann::json to_json(const job_record& r);
// A node as `submit list --json` shows it (resources, GPUs, accelerator type, GPU memory).
nlohmann::json to_json(const node_info& n);
job_record job_record_from_json(const nlohmann::json& j);
// "PENDING", ... → job_state; throws std::invalid_argument for anything else.
job_state parse_job_state(const std::string& text);

}  // namespace cohort::actors

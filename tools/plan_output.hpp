// How `submit plan` shows where a job would run and what each rank needs: a table for people
// (nodes, ranks, GPU memory and host RAM per rank, then the items of one rank) and JSON for
// machines. Shared by submit (the plan the head computed) and cohort-local (plans over --nodes).
#pragma once

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/messages.hpp"
#include "core/resources/placement.hpp"

namespace cohort::tools {

// "31.2 GiB"; "12.5 MiB" below 1 GiB (as core/train/memory_estimate.hpp's format_memory).
std::string format_bytes(double bytes);

// The table: the trainer's node, each node with its ranks, each rank with its node, GPU memory
// ("-" for a CPU job) and host RAM, and (memory.known) the items of one rank.
void print_plan(std::ostream& out, const std::string& job_name,
                const core::resources::placement& plan, const actors::memory_plan& memory);

// {"trainer": ..., "ranks": [...], "memory": {...}} ("memory" only when memory.known): the
// placement as core::resources::plan_json_text writes it, with the memory section.
nlohmann::json plan_json(const core::resources::placement& plan, const actors::memory_plan& memory);

}  // namespace cohort::tools

// Placement of a job's bundles on cluster nodes with Ray's strategies. A job has one bundle per
// worker rank; the trainer's resources are merged into rank 0's bundle, so the trainer always runs
// on rank 0's node. Placement is exact (no greedy misses): rank 0's bundle is tried on every kind
// of node (nodes holding as many bundles with and without it are alike: the first such is tried)
// and the identical bundles of ranks 1..N-1 are counted per node.
#pragma once

#include <string>
#include <vector>

#include "config/job_spec.hpp"
#include "core/resources/node_inventory.hpp"

namespace cohort::core::resources {

enum class placement_status {
  placed,      // every bundle has a node with free resources now
  pending,     // fits the alive nodes' total resources, not what is free now: wait
  infeasible,  // does not fit even the alive nodes' total resources
};
const char* to_string(placement_status s);  // "placed", "pending", "infeasible"

struct placement {
  std::string trainer_node;                // always rank_nodes[0]
  std::vector<std::string> rank_nodes;     // node of rank 0..N-1
  std::vector<resource_set> rank_bundles;  // what rank i reserves; rank 0's includes the trainer's
};

struct placement_result {
  placement_status status = placement_status::infeasible;
  placement plan;      // filled when placed
  std::string reason;  // when not placed: which rank's bundle, which resource, how much is
                       // missing, on the closest node
};

// The bundles of a job: rank 0 = resources_per_worker + trainer_resources, the others
// resources_per_worker.
std::vector<resource_set> job_bundles(const config::scaling_spec& scaling);

// Places the job on the alive nodes, by their free resources; dead nodes are ignored, and so are
// the nodes scaling.nodes does not name when it names any.
//   PACK: as few nodes as possible; SPREAD: as many distinct nodes as possible;
//   STRICT_PACK: all on one node; STRICT_SPREAD: every rank on its own node.
// Ranks sharing a node get consecutive numbers, rank 0's node first. Ties go to the node listed
// first.
placement_result plan_placement(const config::scaling_spec& scaling,
                                const std::vector<node_inventory>& nodes);
inline placement_result plan_job(const config::job_spec& spec,
                                 const std::vector<node_inventory>& nodes) {
  return plan_placement(spec.scaling, nodes);
}

// Reserves every bundle of plan on its node: all or nothing. Throws resource_error naming the node
// and what is missing (or unknown/dead node); the inventories are unchanged then.
void reserve(const placement& plan, std::vector<node_inventory>& nodes);
// Gives back what reserve(plan) took. Nodes no longer in the list (gone from the cluster) are
// skipped. Throws resource_error, changing nothing, if it would free more than a node's total.
void release(const placement& plan, std::vector<node_inventory>& nodes);

// The `submit plan` answer: {"trainer": "<node>", "ranks": ["<node of rank 0>", ...]}.
std::string plan_json_text(const placement& plan);

}  // namespace cohort::core::resources

// The worker actor of a worker in an OS process of its own (worker_process_actor.cpp): the node's
// spawner for such workers (cluster-worker). Its state is private to its source file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/node_actor.hpp"

namespace cohort::actors {

// The spawner for workers in OS processes of their own, running `program` (cohort-worker), each
// with CUDA_VISIBLE_DEVICES naming its GPUs by the node's `gpu_ids` (see worker_environment).
worker_spawner process_workers(std::string program, std::vector<std::string> gpu_ids,
                               std::int32_t gpu_count);

}  // namespace cohort::actors

// The failure drills of an embedded cluster (local_cluster): in-process messages only, never on the wire.
//
// A drill kills a worker or a trainer as a crash would, at a moment the caller chooses. Only code
// in the same actor system can send one: the drills have no wire_id and no field list, so the wire
// codec (actors/wire_protocol.cpp, which static_asserts that they are not registered) can neither
// decode nor encode them, and no process with the cluster's credentials can send a node a drill.
// Tests of real processes (tests/cluster, tests/chaos) kill the processes themselves instead.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::actors {

// → node: kill the worker of rank `rank` of `job_id` as a crash would. Reply: bool (whether this
// node had it).
struct kill_worker_drill {
  std::string job_id;
  std::int32_t rank = 0;
};
// → node: kill the trainer of `job_id` as a crash would. Reply: bool (whether this node had it).
struct kill_trainer_drill {
  std::string job_id;
};

}  // namespace cohort::actors

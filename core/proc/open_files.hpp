// The open-files limit (RLIMIT_NOFILE) of cohort's processes. Linux starts most sessions at a soft
// limit of 1,024, which a rank of a large job outgrows: every collective peer is a socket or
// more (Gloo pairs, NCCL's bootstrap and proxy connections), besides the data set's shards, the
// checkpoint files and the process's own pipes. cluster-head, cluster-worker and cohort-worker
// raise their soft limit to the hard limit at start and say what they have; a rank whose limit is
// still below what a rank of its job may need says so in the job's log.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cohort::core::proc {

struct open_files_limit {
  std::uint64_t before = 0;  // the soft limit found
  std::uint64_t soft = 0;    // the soft limit now
  std::uint64_t hard = 0;    // the hard limit (RLIM_INFINITY as UINT64_MAX)
  std::string error;         // why it could not be read or raised ("" when it was)
};

// Raises this process's soft open-files limit to its hard limit (children inherit it).
open_files_limit raise_open_files_limit();

// "open files: 1048576 (raised from 1024, the hard limit)", "open files: 1024 (the hard limit)".
std::string describe(const open_files_limit& limit);

// What one rank of a job of `world_size` ranks may hold open, as an estimate: 256 for the
// process's own (libraries' descriptors, pipes, logs, data shards and checkpoint files open at
// once) and 8 a peer (the Gloo and NCCL connections to each other rank, both directions).
std::uint64_t open_files_per_rank(std::int64_t world_size);

// The warning for a rank whose soft limit `soft` is below open_files_per_rank(world_size), or
// nothing. Names the node and what to do.
std::optional<std::string> open_files_warning(std::uint64_t soft, std::int64_t world_size,
                                              const std::string& node);

}  // namespace cohort::core::proc

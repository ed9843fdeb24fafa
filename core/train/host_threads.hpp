// The host threads a worker process computes with: torch's intra-op pool, and OpenBLAS's own
// pool, which torch does not size (Debian's torch calls the system BLAS, and OpenBLAS's pthread
// build starts one thread per core that spins in sched_yield between calls). One rank per
// process: the BLAS pool follows torch's, so a node's ranks do not oversubscribe its cores.
#pragma once

#include <string>

namespace cohort::core::train {

// Sets OpenBLAS's pool to at::get_num_threads() threads, unless OPENBLAS_NUM_THREADS is set in
// the environment (the user's, or the job's runtime_env, decides then). Returns what it did, for
// the worker's first log line: "OpenBLAS threads 2", "OpenBLAS threads from OPENBLAS_NUM_THREADS",
// or "" when the process's BLAS is not OpenBLAS. Call once, before the workload starts.
std::string match_blas_threads_to_torch();

// Sizes torch's intra-op pool to `threads` (a rank bound to that many CPUs), unless
// OMP_NUM_THREADS is set in the environment. Returns what it did, for the worker's first log
// line: "8 host threads", "host threads from OMP_NUM_THREADS". Call before the workload starts,
// and before match_blas_threads_to_torch.
std::string size_host_threads(int threads);

}  // namespace cohort::core::train

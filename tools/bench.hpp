// What `cohort-bench` does that needs no cluster: the node counts it runs, the spec of one run
// (restricted to the first nodes of the node list), what it reads back from a run's directory
// (throughput medians from rank 0's metrics.jsonl, memory peaks from every rank's memory CSV),
// and the CSV it writes, one row per run. The loop that submits and waits is
// tools/cohort-bench/main.cpp. No torch and no actors here.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/hostfile.hpp"
#include "config/job_spec.hpp"

namespace cohort::tools {

// A file the bench cannot read or write; what() names the file (and line) and what is wrong.
class bench_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// --counts "1,2,4": node counts, each from 1 to `nodes` (the node list's length). Throws
// config::spec_error("--counts") naming the bad item and what is allowed.
std::vector<int> parse_node_counts(const std::string& text, std::size_t nodes);
// The counts run when --counts is not given: 1, 2, 4, ... up to `nodes`, and `nodes` itself.
std::vector<int> default_node_counts(std::size_t nodes);

// --group-size B (a burn-in, as DeepSpeed-Chat's make_batch.py splits a node list): the node list
// cut in its order into disjoint groups of B nodes; the nodes after the last whole group are left
// over (the bench says so; they run in no group). Throws config::spec_error("--group-size") when
// B is not 1 to the list's length.
struct node_groups {
  std::vector<std::vector<config::host_entry>> groups;
  std::vector<config::host_entry> left_over;
};
node_groups make_node_groups(const std::vector<config::host_entry>& hosts, int group_size);

// The spec of the run on the first `count` hosts: named `name`, scaling.nodes those hosts,
// num_workers the sum of their slots (not elastic), ranks spread over them (SPREAD, unless the
// spec asks STRICT_SPREAD), and run.memory_status_every_s `memory_every_s` where the spec leaves
// it off, so that the run's memory peaks are recorded.
config::job_spec bench_spec(const config::job_spec& base, const std::vector<config::host_entry>& hosts,
                            int count, const std::string& name, double memory_every_s);
// A job name for the run on `count` nodes: "<base>-<count>n-<stamp>", the base cut so that the
// whole stays within 128 characters; "-2", "-3", ... appended while <storage_path>/<name> exists.
std::string bench_run_name(const std::string& base, int count, const std::string& stamp,
                           const std::string& storage_path);
// The same for group `group` (from 1) of a burn-in: "<base>-g<group>-<count>n-<stamp>".
std::string bench_group_run_name(const std::string& base, int group, int count, const std::string& stamp,
                                 const std::string& storage_path);

struct run_throughput {
  std::int64_t steps = 0;               // logged steps after the warmup that were measured
  std::optional<double> samples_per_s;  // median over those steps of global batch / step_s
  std::optional<double> tokens_per_s;   // median
  std::optional<double> mfu;            // median; absent when no step logged one (CPU)
};
// Reads rank 0's <run_dir>/metrics.jsonl, skipping steps <= warmup_steps. No file: nothing
// measured (steps 0). A line that is not a step's JSON object: bench_error naming file and line.
run_throughput read_run_throughput(const std::string& run_dir, std::int64_t global_batch,
                                   std::int64_t warmup_steps);

struct memory_peaks {
  std::optional<std::int64_t> host_bytes;  // the largest rank's peak RSS
  std::optional<std::int64_t> gpu_bytes;   // the largest rank's peak allocated GPU memory
};
// The peaks over every rank's <run_dir>/memory/rank-N.csv; both absent when the run wrote none.
// A malformed file: bench_error naming it.
memory_peaks read_run_memory_peaks(const std::string& run_dir);

enum class run_status { ok, failed, timeout };
const char* to_string(run_status s);  // "ok", "failed", "timeout"

struct bench_row {
  int nodes = 0;
  int group = 0;                        // a burn-in's group, from 1 (0: a run on the first nodes)
  std::vector<std::string> node_names;  // the nodes the run was given
  int workers = 0;
  std::string job_id;
  std::string run_name;  // the job's name: its run directory is <run.storage_path>/<run_name>
  run_status status = run_status::failed;
  run_throughput throughput;
  memory_peaks memory;
  double min_samples_per_s = 0;  // the threshold
  std::string reason;            // why a run failed or timed out, or what could not be measured
  // ok, a samples/s measured, and at least the threshold.
  bool passed() const;
};

// A number as the CSV writes it: plain, 6 significant digits.
std::string bench_csv_number(double v);
// The CSV's header line (without the newline).
extern const char* const bench_csv_header;
// One row (without the newline): numbers in plain notation, empty cells for what was not
// measured, the reason quoted.
std::string bench_csv_line(const bench_row& row);
// Opens the CSV to append rows: a new or empty file gets the header first. Throws
// config::spec_error naming the file when an existing one does not start with the header (it is
// not a cohort-bench CSV), bench_error when it cannot be written.
std::ofstream open_bench_csv(const std::string& path);

}  // namespace cohort::tools

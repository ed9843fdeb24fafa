// The job spec: what a user submits (Ray's ScalingConfig/RunConfig and DeepSpeed's config in one
// JSON file), as plain structs. parse_job_spec() reads and validates it; every error names the
// JSON path, the value and what is allowed. No CAF, no torch here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cohort::config {

// Quantities by resource name: "CPU", "GPU", "memory" (bytes) or any custom tag ("large_cpu_mem").
using resource_quantities = std::map<std::string, double>;

enum class placement_strategy { pack, spread, strict_pack, strict_spread };
enum class lr_schedule { constant, cosine, linear };
enum class precision { fp32, bf16 };
// How the model computes (core/model/decoder.hpp): automatic is fused on GPUs, plain on the CPU.
enum class compute_path { automatic, plain, fused };
enum class offload_device { none, cpu };
enum class score_order { min, max };
// What the workers run. causal_lm is the training engine; reward_model the same engine training a
// decoder with a scalar `score` head on pairs (DeepSpeed-Chat's step 2); linear_regression is a
// small built-in job (a data-parallel least-squares fit) used by the quick start and the cluster
// tests.
enum class workload_kind { causal_lm, linear_regression, reward_model };

// Whether the workload trains a model with the training engine (causal_lm, reward_model): model
// and data sections, checkpoints, memory plans and exports apply.
inline bool trains_model(workload_kind w) {
  return w == workload_kind::causal_lm || w == workload_kind::reward_model;
}

// LoRA fine-tuning (model.lora): the base model frozen, low-rank adapters A (r × in) and
// B (out × r) trained on the linear maps target_modules names (peft's names: q_proj, c_attn, ...),
// y = W x + (alpha / r) · B A dropout(x).
struct lora_spec {
  bool enabled = false;  // model.lora present
  int r = 8;
  double alpha = 8;
  double dropout = 0;
  std::vector<std::string> target_modules;
  // The dtype the frozen base is held in; nullopt: train.precision.
  std::optional<precision> base_dtype;
};

// The module names model.lora.target_modules accepts (every family's, as peft names them).
const std::vector<std::string>& lora_module_names();

struct model_spec {
  std::string hf_dir;             // fine-tune: a Hugging Face directory, or s3://BUCKET/PREFIX holding one
  std::string config_file;        // pretrain: a config.json path ...
  std::string inline_config_json; // ... or an inline HF-style config object, serialized
  std::uint64_t init_seed = 0;
  lora_spec lora;                 // needs hf_dir
  // Added special tokens (needs hf_dir): the {"tokens": [...]} file data.train was built with
  // (`cohort-data build --special-tokens FILE`). The engine then grows the model's embedding and
  // LM head to the data set's vocabulary, new rows at the old rows' mean. "": no added tokens.
  std::string added_tokens;
  // The grown vocabulary (and, without added tokens, the model's own) rounded up to a multiple
  // of this, as transformers' resize_token_embeddings(pad_to_multiple_of); 1: no rounding.
  // Needs hf_dir. A vocabulary never shrinks.
  int pad_vocab_to_multiple_of = 1;
};

struct data_spec {
  // A directory written by `cohort-data build`, or "s3://BUCKET[/PREFIX]" holding one: its shards
  // are then streamed into each rank's cache_dir/rank-<N>, at most cache_bytes at a time (the
  // least recently read shards are dropped), each checked against the manifest's XXH64 when
  // fetched; S3 is reached as for run.storage_path (run.s3_endpoint, the AWS environment).
  std::string train;
  std::string eval;   // optional; a directory
  std::string cache_dir;  // "" : <the worker's temp dir>/cohort-data-cache/BUCKET/PREFIX
  std::uint64_t cache_bytes = std::uint64_t{10} << 30;
  // Before training, every rank checks the XXH64 of every shard file of `train` (any rank may read
  // any shard) against the data set's manifest; a corrupt file fails the job, named. false skips it.
  bool verify = true;
};

struct scaling_spec {
  int num_workers = 1;
  // Elastic jobs: with room for fewer than num_workers ranks but at least min_workers, an attempt
  // starts on w ranks, the largest w in [min_workers, num_workers] that divides
  // num_workers × train.grad_accum, with grad_accum × num_workers / w (same global batch); every
  // restart tries num_workers first. 0 (the default): num_workers, not elastic.
  int min_workers = 0;
  // Elastic jobs running on fewer than num_workers ranks grow back by themselves once placement
  // holds more: the attempt saves a checkpoint after its next step and restarts on more workers
  // (a resize, counted as neither failure nor preemption), at most once per this many seconds of
  // an attempt running. 0: as soon as room appears.
  double resize_interval_s = 60;
  bool use_gpu = false;
  resource_quantities resources_per_worker;  // default {"CPU": 1} (+ {"GPU": 1} with use_gpu)
  resource_quantities trainer_resources;     // default {}: merged into rank 0's bundle
  placement_strategy strategy = placement_strategy::pack;
  // Node affinity: when not empty, the trainer and every rank are placed only on the nodes named
  // here (Ray's node affinity; `cohort-bench` runs a spec on 1, 2, 4, ... nodes with it). Each
  // name at most once. Empty: any node.
  std::vector<std::string> nodes;
  // DeepSpeed's launcher's --bind_cores_to_rank: each rank keeps to its share of the CPUs its
  // node lets it use, split evenly and in order among the job's ranks on that node, and sizes its
  // host threads to that share (unless the job sets OMP_NUM_THREADS). For the host update of CPU
  // offload: no two ranks' threads on one core, each rank's memory touched from its cores.
  bool bind_cores_to_rank = false;
};

struct train_spec {
  int seq_len = 512;
  int micro_batch_size = 1;
  int grad_accum = 1;
  int epochs = 1;
  std::int64_t max_steps = 0;  // 0: run the epochs
  // A smoke test of the whole run: one optimizer step (the LR schedule still spans the full run),
  // then the final checkpoint and the export as after a full run.
  bool as_test = false;
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  int warmup_steps = 0;
  lr_schedule schedule = lr_schedule::constant;
  double min_lr_ratio = 0.0;
  double weight_decay = 0.0;
  double grad_clip = 1.0;  // 0: no clipping
  precision dtype = precision::fp32;
  std::uint64_t seed = 0;
  int log_every = 1;
  bool activation_checkpointing = false;
  compute_path path = compute_path::automatic;
  std::int64_t loss_chunk_tokens = 2048;  // fused path: positions per chunk of the loss; 0 = one
  // Bitwise the same results run to run on GPUs (deterministic kernels, attention by the math
  // path), at a cost in speed; CPU runs are deterministic anyway.
  bool deterministic = false;
  // On a GPU, without recomputation or ZeRO-3's layer-by-layer path and without dropout, a
  // micro-batch's forward and backward are captured once as a CUDA graph (torch.cuda.graph's
  // whole-network capture) and replayed at every later step: one launch instead of thousands.
  bool cuda_graph = true;
  double step_delay_s = 0.0;  // pause after each step (demos and failure drills)
  // With data.eval: every this many steps (and after the last step) all ranks evaluate the eval
  // data set; eval_loss and eval_perplexity join the step's metrics. 0: never.
  std::int64_t eval_every = 0;
};

struct zero_spec {
  int stage = 0;  // 0..3
  offload_device offload_optimizer = offload_device::none;
  // Stage 3 only: the fp32 master shard, moments, gradient shard and a compute-dtype copy of the
  // shard live in host memory; the GPU holds only the units being used (DeepSpeed's offload_param).
  offload_device offload_param = offload_device::none;
  // With offload_param: the host update of a step runs during the next step, which computes on
  // the weights from the update before (ZeRO-Offload's delayed parameter update; changes the
  // results, so an opt-in).
  bool delayed_param_update = false;
  // Stage 3: how many layers, the last ones first, keep their gathered weights from their forward
  // to their backward instead of gathering them again for it (FSDP2's reshard_after_forward off
  // for those blocks). 0: as many as the memory plan leaves room for on the rank's GPU (at least
  // the last layer; see memory_estimate::layers_kept_gathered).
  std::int64_t layers_kept_gathered = 0;
};

struct checkpoint_spec {
  int every_steps = 0;   // 0: only at the end
  int num_to_keep = 0;   // 0: keep all
  std::string score_attribute;
  score_order order = score_order::min;
  bool async = false;
  // An asynchronous save copies the rank's shard into host memory and writes it while training
  // goes on, when the shard is at most this many bytes; a larger one is written in the foreground,
  // streamed from where it lies through one 64 MiB buffer (no second copy of the shard).
  std::int64_t staging_bytes = std::int64_t{4} << 30;
  // Each rank also keeps its shard of every checkpoint it saves in its node's host memory and
  // sends a copy to a buddy rank on another node (core/ckpt/replica.hpp): a restarted attempt
  // of the same size restores from those copies instead of reading storage.
  bool replicate = false;
  // With replicate: every this many steps (0: never) between the saves, each rank also takes a
  // replica of its full checkpoint shard into its node's memory and its buddy's, without writing
  // storage; a restart of the same size resumes from the newest complete one when it is newer
  // than the newest committed checkpoint.
  int replicate_every = 0;
  // Every this many steps (0: never) rank 0 also writes the committed checkpoint of that step as a
  // Hugging Face directory, <run>/exports/step-N (the final step's is <run>/model), keeping the
  // newest num_exports_to_keep (0: all). A multiple of every_steps; local storage_path only.
  int export_every = 0;
  int num_exports_to_keep = 0;
  // The end of the run saves the last step and exports it to <run>/model. false: it saves and
  // exports nothing (a benchmark, a smoke test: the run's outcome is its metrics and whatever
  // every_steps saved).
  bool final = true;
};

struct failure_spec {
  int max_failures = 0;  // 0 fail at once, n at most n restarts, -1 always restart
  // A rank whose step does not advance for hang_timeout_s (startup_timeout_s before its first
  // step: model load, rendezvous) while it is not waiting in a collective is hung: the trainer
  // names it, kills its process and ends the attempt (restarted under max_failures). Each
  // collective a rank waits on fails after collective_timeout_s, which must be longer than
  // hang_timeout_s so that the detector names the hung peer before the waiting rank fails.
  double hang_timeout_s = 120;
  double startup_timeout_s = 600;   // >= hang_timeout_s
  double collective_timeout_s = 300;  // > hang_timeout_s
  // A preemption (a node of the attempt announced that it leaves: SIGTERM to cluster-worker, or
  // `submit drain NODE`): the job saves an emergency checkpoint after its next step and the
  // attempt is stopped once it commits, or after preemption_grace_s at the latest; the job then
  // restarts elsewhere. Preemptions count against max_preemptions (-1: unlimited, 0: fail the
  // job at the first, n: at most n restarts), never against max_failures.
  double preemption_grace_s = 30;
  int max_preemptions = -1;
  // A rank saving a checkpoint or exporting the final model is judged by its written bytes, not
  // its step: hung when they do not advance for this long. A rank waiting for a checkpoint's
  // commit, or done with its run, is never judged by its progress (only by its heartbeats).
  double checkpoint_timeout_s = 600;
};

struct run_spec {
  // A directory, or "s3://BUCKET[/PREFIX]": the run's checkpoints then live in S3 (credentials
  // and region from the workers' AWS environment, see core/storage/s3_client.hpp), and each
  // worker keeps its local files (checkpoint staging, verified copies, metrics, the export) in
  // local_dir/<name>.
  std::string storage_path = "runs";
  std::string s3_endpoint;  // "" : AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS's
  std::string local_dir;    // "" : <the worker's temp dir>/cohort-runs
  checkpoint_spec checkpoint;
  failure_spec failure;
  bool resume = true;
  // 0: none. Otherwise every rank of every attempt that reaches this 1-based step waits before
  // running it until the job is released (`submit release JOB`, for the attempt then running) or
  // stopped; `submit status` shows the job held meanwhile. For stepping through a run (inspect
  // it, ask for a checkpoint at an exact step) and for tests that must act while a job runs.
  std::int64_t hold_before_step = 0;
  // More steps to hold before, each as hold_before_step and each needing its own release:
  // strictly increasing, >= 1. An attempt's n-th hold waits for the attempt's n-th release.
  std::vector<std::int64_t> hold_before_steps;
  // Each rank appends the sample indices of every step it ran to <run>/samples/rank-N.jsonl.
  bool sample_log = false;
  // Steps each rank profiles (strictly increasing, >= 1): what its GPU (or, on a CPU, its torch
  // operators) did, where the time went and how long the device sat idle, written to
  // <run>/profile/ per stretch of consecutive steps (core/train/step_profiler.hpp).
  std::vector<std::int64_t> profile_steps;
  // > 0: each rank samples its host RSS and GPU memory every this many seconds (and at every
  // logged step) into <run>/memory/rank-N.csv. 0: off.
  double memory_status_every_s = 0.0;
};

// Whether the run holds at all (hold_before_step or hold_before_steps), and whether it holds
// before 1-based step `step`.
bool has_holds(const run_spec& run);
bool holds_before(const run_spec& run, std::int64_t step);

// Ray's runtime_env, the part cohort supports: environment variables for every worker process.
// Names that change what code a process loads or runs (LD_*, PATH, PYTHON*, ...), the GPU
// assignment (CUDA_VISIBLE_DEVICES) and cohort's own COHORT_* are refused at parse time; see
// runtime_env_rules.
struct runtime_env_spec {
  std::map<std::string, std::string> env_vars;
};
inline constexpr std::size_t max_env_vars = 64;
inline constexpr std::size_t max_env_var_bytes = 4096;  // per name and per value
// The one COHORT_* a job may set: caps each worker's GPU memory (a number of GiB > 0).
inline constexpr const char* gpu_memory_limit_variable = "COHORT_GPU_MEMORY_LIMIT_GB";
// The number of GiB a COHORT_GPU_MEMORY_LIMIT_GB value names, or 0 when it is not a number > 0.
double gpu_memory_limit_gib(const std::string& text);
// What runtime_env.env_vars allows, for error messages and docs.
extern const char* const runtime_env_rules;

// Limits on every job spec, checked by parse_job_spec (so by `submit` and by the head alike),
// each refusal naming the limit. The spec's JSON text (and a DeepSpeed config file's) is at most
// max_spec_bytes; arrays and objects nest at most max_spec_depth deep (checked before the JSON is
// parsed, so a deeply nested file is refused instead of overflowing the stack). Per-rank sizes
// are bounded so that products of them cannot overflow and an absurd value is refused by name.
inline constexpr std::size_t max_spec_bytes = 1u << 20;  // 1 MiB
inline constexpr int max_spec_depth = 64;
inline constexpr int max_micro_batch_size = 65536;  // train.micro_batch_size
inline constexpr int max_grad_accum = 65536;        // train.grad_accum
inline constexpr int max_seq_len = 1 << 20;         // train.seq_len (tokens)

struct job_spec {
  std::string name;
  workload_kind workload = workload_kind::causal_lm;
  model_spec model;
  data_spec data;
  scaling_spec scaling;
  train_spec train;
  zero_spec zero;
  run_spec run;
  runtime_env_spec runtime_env;
};

// A spec that cannot be accepted. path is the JSON path ("scaling.num_workers", "" for the whole
// document), what() the whole message: path, offending value and what is allowed.
class spec_error : public std::runtime_error {
 public:
  spec_error(std::string path, const std::string& message)
      : std::runtime_error((path.empty() ? std::string("(top level)") : path) + ": " + message),
        path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Throws spec_error (path `path`) when `text`, called `source` in the message, is longer than
// max_spec_bytes or nests arrays/objects deeper than max_spec_depth. Needs no valid JSON: a scan
// that skips strings, so it is safe on any input.
void check_json_limits(const std::string& text, const std::string& path, const std::string& source);
// Parses a job spec from JSON text. base_dir resolves relative paths inside the spec (the
// directory of the JOB.json file); "." or "" leaves them as written. Throws spec_error, also for
// text over the limits above.
job_spec parse_job_spec(const std::string& json_text, const std::string& base_dir = ".");
// Reads and parses a JOB.json file; a missing or unreadable file is a spec_error naming it.
// Every path field comes back absolute, so the spec means the same on any machine and in any
// working directory: model.hf_dir, model.config, model.added_tokens, data.train, data.eval,
// run.storage_path and a "deepspeed" file resolve against the absolute directory of the file;
// the default storage_path ("runs") against the current working directory (where --local would
// have written it). An s3:// location (model.hf_dir, data.train, run.storage_path) stays as
// given, in canonical form.
job_spec load_job_spec(const std::string& path);
// What running a job needs beyond a valid spec (`submit plan` does not need it): causal_lm needs
// model (hf_dir or config) and data.train. Throws spec_error naming the missing field.
void check_runnable(const job_spec& spec);
// The spec as canonical JSON text (round-trips through parse_job_spec).
std::string to_json_text(const job_spec& spec);

// The metrics a job's steps record (metrics.jsonl, checkpoint manifests) and so the values
// run.checkpoint.score_attribute may name: loss, lr, grad_norm, tokens_per_s, mfu, and
// eval_loss, eval_perplexity when data.eval is set.
std::vector<std::string> score_attributes(const job_spec& spec);

// Names as they appear in JSON ("PACK", "cosine", "bf16", ...).
const char* to_string(placement_strategy s);
const char* to_string(lr_schedule s);
const char* to_string(precision p);
const char* to_string(compute_path p);
const char* to_string(offload_device d);
const char* to_string(workload_kind w);
const char* to_string(score_order o);

// The spec an attempt on `workers` ranks (scaling.min_workers ≤ workers ≤ num_workers) runs:
// num_workers = workers and grad_accum scaled so that the global batch stays the same. Throws
// spec_error when grad_accum × num_workers is not a multiple of `workers`.
job_spec shrunk_to(const job_spec& spec, int workers);

// Global batch in samples: micro_batch_size × grad_accum × num_workers.
inline std::int64_t global_batch(const job_spec& s) {
  return std::int64_t{s.train.micro_batch_size} * s.train.grad_accum * s.scaling.num_workers;
}

// The run's directory on the machine a rank runs on: <storage_path>/<name>, or for a run in S3
// its local copy, <local_dir, else $TMPDIR/cohort-runs>/<name>.
std::string local_run_dir(const std::string& name, const std::string& storage_path, const std::string& local_dir);

}  // namespace cohort::config

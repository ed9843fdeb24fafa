// Job table, node registry and failure policy of the head (see head_state.hpp).
#include "actors/head_state.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>


namespace cohort::actors {

namespace res = cohort::core::resources;

namespace {

double offered_gpus(const node_info& node) {
  auto it = node.resources.find("GPU");
  return it == node.resources.end() ? 0.0 : it->second;
}

}  // namespace

void head_state::add_node(const node_info& node) {
  res::node_inventory inventory(node.name, res::resource_set(node.resources));
  inventory.set_gpu_memory_bytes(node.gpu_memory_bytes);
  res::gpu_pool pool(static_cast<std::int32_t>(std::floor(offered_gpus(node) + 1e-9)));
  // What running attempts hold on a node that registers again stays reserved.
  for (const auto& [id, job] : jobs_) {
    if (!job.held) continue;
    for (std::size_t r = 0; r < job.held->rank_nodes.size(); ++r)
      if (job.held->rank_nodes[r] == node.name) inventory.reserve(job.held->rank_bundles[r]);
    try {
      res::take_gpus_on(node.name, *job.held, job.gpus, pool);
    } catch (const res::resource_error& e) {
      // The node came back with fewer GPUs than the attempt holds: its workers report the loss.
      std::fprintf(stderr, "cluster-head: node %s: job %s keeps GPUs it no longer offers: %s\n",
                   node.name.c_str(), id.c_str(), e.what());
    }
  }
  gpu_pools_[node.name] = std::move(pool);
  node_infos_[node.name] = node;
  largest_gpu_offer_ = std::max(largest_gpu_offer_, offered_gpus(node));
  auto it = std::lower_bound(nodes_.begin(), nodes_.end(), node.name,
                             [](const auto& n, const std::string& name) { return n.name() < name; });
  if (it == nodes_.end() || it->name() != node.name)
    nodes_.insert(it, std::move(inventory));
  else
    *it = std::move(inventory);
}

void head_state::remove_node(const std::string& name) {
  // A node that left after its notice may come back (a spot instance returns) as a new node; an
  // operator's drain stays until undrain.
  if (auto it = draining_.find(name); it != draining_.end() && it->second == "preempted")
    draining_.erase(it);
  gpu_pools_.erase(name);
  node_infos_.erase(name);
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(),
                              [&](const auto& n) { return n.name() == name; }),
               nodes_.end());
}

bool head_state::has_node(const std::string& name) const {
  return std::any_of(nodes_.begin(), nodes_.end(), [&](const auto& n) { return n.name() == name; });
}

std::vector<node_info> head_state::nodes() const {
  std::vector<node_info> out;
  for (const auto& n : nodes_) {
    auto it = node_infos_.find(n.name());
    out.push_back(it != node_infos_.end() ? it->second
                                          : node_info{n.name(), n.total().quantities()});
    out.back().drain_state = drain_state(n.name());
  }
  return out;
}

std::vector<std::string> head_state::drain(const std::string& node, const std::string& kind) {
  if (kind != "preempted" && kind != "drained")
    throw std::invalid_argument("drain kind \"" + kind + "\": must be preempted or drained");
  if (!has_node(node)) {
    std::string known;
    for (const auto& n : nodes_) known += (known.empty() ? "" : ", ") + n.name();
    throw std::invalid_argument("no node named \"" + node + "\" is registered (nodes: " +
                                (known.empty() ? "none" : known) + ")");
  }
  auto& mark = draining_[node];
  if (mark != "drained") mark = kind;  // an operator's drain outlives the node's own notice
  return jobs_placed_on(node);
}

bool head_state::undrain(const std::string& node) { return draining_.erase(node) > 0; }

std::string head_state::drain_state(const std::string& node) const {
  auto it = draining_.find(node);
  return it == draining_.end() ? "" : it->second;
}

std::vector<res::node_inventory> head_state::schedulable() const {
  std::vector<res::node_inventory> out;
  for (const auto& n : nodes_)
    if (draining_.count(n.name()) == 0) out.push_back(n);
  return out;
}

bool head_state::begin_preemption(const std::string& job_id, const std::string& node, const std::string& why,
                                  std::int64_t now_ms, std::int64_t notice_deadline_ms) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  auto& job = it->second;
  if (!job.held || is_terminal(job.record.state) || job.preempting) return false;
  job.resizing.reset();  // the node leaves: the restart is a preemption's
  const double grace_s = job.spec.run.failure.preemption_grace_s;
  const auto grace_end = now_ms + static_cast<std::int64_t>(grace_s * 1000);
  const bool notice_first = notice_deadline_ms > 0 && notice_deadline_ms < grace_end;
  // The emergency checkpoint is one of a step after the last the head has heard of: a commit of an
  // earlier step reported after the notice (commits are reported with the next step) is not it.
  job.preempting = job_entry::preemption{job.record.attempts - 1,
                                         node,
                                         why,
                                         std::max(job.record.checkpoint_step, job.record.step),
                                         notice_first ? notice_deadline_ms : grace_end,
                                         ""};
  job.record.reason =
      "preempting attempt " + std::to_string(job.record.attempts) + ": " + why +
      "; saving an emergency checkpoint within " +
      (notice_first ? res::format_quantity(static_cast<double>(
                          std::max<std::int64_t>(0, notice_deadline_ms - now_ms) / 1000)) +
                          " s (the notice's deadline, before run.failure.preemption_grace_s " +
                          res::format_quantity(grace_s) + " s)"
                    : res::format_quantity(grace_s) + " s");
  mirror_phase(job);
  return true;
}

void head_state::mirror_phase(job_entry& job) {
  auto& r = job.record;
  r.phase = job.preempting ? "preempting" : job.resizing ? "resizing" : "";
  r.phase_checkpoint_before = job.preempting ? job.preempting->checkpoint_before
                              : job.resizing ? job.resizing->checkpoint_before
                                             : 0;
  r.phase_deadline_ms = job.preempting ? job.preempting->deadline_ms : 0;
  r.phase_node = job.preempting ? job.preempting->node : "";
  r.phase_why = job.preempting ? job.preempting->why : "";
  r.phase_to = job.resizing ? job.resizing->to : 0;
}

void head_state::restore_phase(job_entry& job) {
  const auto& r = job.record;
  const std::int32_t attempt = r.attempts - 1;
  if (job.awaiting_adoption && r.phase == "preempting") {
    job.preempting = job_entry::preemption{
        attempt, r.phase_node, r.phase_why, r.phase_checkpoint_before, r.phase_deadline_ms, ""};
  } else if (job.awaiting_adoption && r.phase == "resizing") {
    job.resizing = job_entry::resize{attempt, static_cast<std::int32_t>(r.rank_nodes.size()), r.phase_to,
                                     r.phase_checkpoint_before};
  }
  mirror_phase(job);  // an attempt that cannot be adopted ended with its head: so did its phase
}

std::int64_t head_state::preemption_deadline_ms(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() || !it->second.preempting ? 0 : it->second.preempting->deadline_ms;
}

bool head_state::emergency_checkpoint_declined(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it != jobs_.end() && it->second.preempting && !it->second.preempting->declined.empty();
}

bool head_state::preempting(const std::string& job_id) const {
  return in_phase(job_id, &job_entry::preempting, false);
}

bool head_state::emergency_checkpoint_committed(const std::string& job_id) const {
  return in_phase(job_id, &job_entry::preempting, true);
}

void head_state::record_preemption(job_entry& job) {
  const auto p = job.preempting.value_or(job_entry::preemption{job.record.attempts - 1, "", "", 0, 0, ""});
  job.preempting.reset();
  job.record.preemptions += 1;
  const int max = job.spec.run.failure.max_preemptions;
  const std::string resumes =
      "; it resumes from " + (job.record.checkpoint_step > 0
                                  ? "step " + std::to_string(job.record.checkpoint_step)
                                  : std::string("the start"));
  const std::string saved =
      job.record.checkpoint_step > p.checkpoint_before
          ? "emergency checkpoint at step " + std::to_string(job.record.checkpoint_step)
      : !p.declined.empty()
          ? p.declined  // "no emergency checkpoint: ...; the job keeps checkpoint step N"
          : "no emergency checkpoint within run.failure.preemption_grace_s (" +
                res::format_quantity(job.spec.run.failure.preemption_grace_s) + " s)" + resumes;
  mirror_phase(job);
  const std::string what = "attempt " + std::to_string(p.attempt + 1) + " preempted (" + p.why + "); " + saved;
  if (max == -1 || job.record.preemptions <= max) {
    job.record.state = job_state::restarting;
    job.record.reason = what + "; restarting on nodes that are not draining (preemption " +
                        std::to_string(job.record.preemptions) + ")";
  } else {
    job.record.state = job_state::failed;
    job.record.reason = what + "; preempted " + std::to_string(job.record.preemptions) +
                        " times (failure.max_preemptions=" + std::to_string(max) + " exhausted)";
  }
}

const job_record& head_state::on_preempted(const std::string& job_id, std::int32_t attempt) {
  auto& job = entry(job_id);
  if (is_terminal(job.record.state) || !job.held || attempt != job.record.attempts - 1)
    return job.record;
  job.awaiting_adoption = false;
  release(job);
  record_preemption(job);
  return job.record;
}

std::int32_t head_state::ranks_it_could_get(const job_entry& job) const {
  auto nodes = schedulable();
  try {
    res::release(*job.held, nodes);  // its ranks may move: what they hold counts as free
  } catch (const res::resource_error&) {
    return 0;  // a node came back offering less than the attempt holds there: not now
  }
  const auto ranks = static_cast<std::int32_t>(job.held->rank_nodes.size());
  const auto fit = fit_elastic(job, nodes, ranks + 1);
  if (fit.admitted.refused || fit.admitted.result.status != res::placement_status::placed) return 0;
  return fit.fewer ? fit.fewer->scaling.num_workers : job.spec.scaling.num_workers;
}

std::int64_t head_state::resize_due_ms(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.record.state != job_state::running || !it->second.held) return 0;
  const auto& job = it->second;
  return job.running_since_ms + static_cast<std::int64_t>(job.spec.scaling.resize_interval_s * 1000);
}

std::vector<head_state::growth> head_state::growable(std::int64_t now_ms) const {
  std::vector<growth> out;
  bool earlier_waits = false;  // a job before it waits for placement: it would take the room first
  for (const auto& id : job_order_) {
    const auto& job = jobs_.at(id);
    const auto& scaling = job.spec.scaling;
    const auto state = job.record.state;
    if (earlier_waits) break;
    earlier_waits = !job.held && (state == job_state::pending || state == job_state::restarting);
    if (job.record.state != job_state::running || !job.held || job.awaiting_adoption || job.preempting ||
        job.resizing || scaling.min_workers <= 0 || job.spec.workload != config::workload_kind::causal_lm)
      continue;
    const auto ranks = static_cast<std::int32_t>(job.held->rank_nodes.size());
    if (ranks >= scaling.num_workers || now_ms < resize_due_ms(id)) continue;
    if (const auto more = ranks_it_could_get(job); more > ranks) out.push_back({id, ranks, more});
  }
  return out;
}

bool head_state::begin_resize(const std::string& job_id, std::int32_t to) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  auto& job = it->second;
  if (!job.held || job.record.state != job_state::running || job.preempting || job.resizing) return false;
  const auto from = static_cast<std::int32_t>(job.held->rank_nodes.size());
  job.resizing = job_entry::resize{job.record.attempts - 1, from, to,
                                   std::max(job.record.checkpoint_step, job.record.step)};
  job.record.reason = "growing from " + std::to_string(from) + " to " + std::to_string(to) +
                      " workers: attempt " + std::to_string(job.record.attempts) +
                      " saves a checkpoint after its next step, then restarts on more nodes";
  mirror_phase(job);
  return true;
}

bool head_state::resizing(const std::string& job_id) const {
  return in_phase(job_id, &job_entry::resizing, false);
}

bool head_state::resize_checkpoint_committed(const std::string& job_id) const {
  return in_phase(job_id, &job_entry::resizing, true);
}

const job_record& head_state::on_resized(const std::string& job_id, std::int32_t attempt) {
  auto& job = entry(job_id);
  if (is_terminal(job.record.state) || !job.held || !job.resizing || attempt != job.record.attempts - 1)
    return job.record;
  const auto r = *job.resizing;
  release(job);
  job.record.resizes += 1;
  job.record.state = job_state::restarting;
  job.record.reason = "attempt " + std::to_string(attempt + 1) + " stopped to grow from " +
                      std::to_string(r.from) + " to " + std::to_string(r.to) +
                      " workers (checkpoint at step " + std::to_string(job.record.checkpoint_step) +
                      "; neither a failure nor a preemption); restarting on more workers";
  return job.record;
}

std::string head_state::submit(const config::job_spec& spec, const std::string& spec_json,
                               const std::string& given_id) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "job-%04lld", static_cast<long long>(next_job_number_++));
  const std::string id = given_id.empty() ? std::string(buffer) : given_id;
  job_entry job;
  job.spec = spec;
  job.record.id = id;
  job.record.name = spec.name;
  job.record.state = job_state::pending;
  job.record.reason = "waiting for placement";
  job.record.spec_json = spec_json;
  plan_memory(job);
  jobs_.emplace(id, std::move(job));
  job_order_.push_back(id);
  return id;
}

void head_state::restore(const job_record& record, config::job_spec spec) {
  job_entry job;
  job.record = record;
  job.spec = std::move(spec);
  job.failures_counted = static_cast<std::int32_t>(record.failures.size());
  plan_memory(job);
  const auto ranks = static_cast<std::int32_t>(record.rank_nodes.size());
  const auto& scaling = job.spec.scaling;
  if (job.record.state == job_state::running && ranks <= scaling.num_workers &&
      ranks >= (scaling.min_workers > 0 ? scaling.min_workers : scaling.num_workers)) {
    // Its trainer may still run on its node: keep the placement until it comes back (an elastic
    // attempt holds as many bundles as it has ranks).
    auto attempt_scaling = scaling;
    attempt_scaling.num_workers = ranks;
    job.held = res::placement{record.trainer_node, record.rank_nodes,
                              res::job_bundles(attempt_scaling)};
    if (record.rank_gpus.size() == record.rank_nodes.size()) job.gpus = record.rank_gpus;
    job.awaiting_adoption = true;
    job.record.reason = "head restarted; waiting for the trainer on " + record.trainer_node;
  } else if (job.record.state == job_state::running) {
    job.record.state = job_state::restarting;
  }
  restore_phase(job);
  // Keep ids unique after a restart: continue numbering after the highest restored.
  long long n = 0;
  if (std::sscanf(record.id.c_str(), "job-%lld", &n) == 1 && n >= next_job_number_)
    next_job_number_ = n + 1;
  if (jobs_.emplace(record.id, std::move(job)).second) job_order_.push_back(record.id);
}

std::vector<std::string> head_state::awaiting_adoption() const {
  std::vector<std::string> out;
  for (const auto& id : job_order_)
    if (jobs_.at(id).awaiting_adoption) out.push_back(id);
  return out;
}

bool head_state::on_trainer_started(const std::string& job_id, std::int32_t attempt) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  auto& job = it->second;
  if (is_terminal(job.record.state) || !job.held || job.record.attempts - 1 != attempt) return false;
  if (job.awaiting_adoption) {
    job.awaiting_adoption = false;
    job.record.reason = "attempt " + std::to_string(attempt + 1) + ": trainer on " +
                        job.record.trainer_node + " adopted after the head restarted";
  }
  return true;
}

std::vector<std::string> head_state::jobs_placed_on(const std::string& node) const {
  std::vector<std::string> out;
  for (const auto& id : job_order_) {
    const auto& job = jobs_.at(id);
    if (!job.held || is_terminal(job.record.state)) continue;
    const auto& nodes = job.held->rank_nodes;
    if (std::find(nodes.begin(), nodes.end(), node) != nodes.end()) out.push_back(id);
  }
  return out;
}

res::placement_result head_state::plan(const config::job_spec& spec) const {
  job_entry job;
  job.spec = spec;
  plan_memory(job);
  return admit(job).result;
}

namespace {

namespace train = cohort::core::train;

// The resource that stands for the host RAM of one rank while placing a job with a memory plan.
constexpr const char* ram_slot = "rank_host_ram";

double node_memory(const res::node_inventory& node) {
  return node.total().get("memory");  // 0: not declared, unknown
}

std::string gpu_advice(const config::job_spec& spec) {
  if (spec.train.deterministic && !spec.train.activation_checkpointing)
    return "train.deterministic computes attention by torch's math path, which keeps every layer's "
           "attention probabilities (micro_batch_size x heads x seq_len^2 in fp32 a layer): try "
           "train.activation_checkpointing: true (one layer's at a time), a smaller "
           "train.micro_batch_size or train.seq_len, or train.deterministic false";
  if (spec.zero.stage < 3) return "try zero.stage 3 with zero.offload_param: \"cpu\" or more workers";
  if (spec.zero.offload_param != config::offload_device::cpu)
    return "try zero.offload_param: \"cpu\" or more workers";
  if (!spec.train.activation_checkpointing)
    return "try train.activation_checkpointing: true (layers recomputed in the backward instead of "
           "keeping their activations), a smaller train.micro_batch_size or train.seq_len";
  return "try a smaller train.micro_batch_size or train.seq_len, or GPUs with more memory";
}

}  // namespace

void head_state::plan_memory(job_entry& job) {
  if (!config::trains_model(job.spec.workload)) return;
  try {
    job.gpu_limit_bytes = train::gpu_memory_limit_bytes(job.spec.runtime_env.env_vars);
    job.memory =
        train::estimate_memory(job.spec, train::read_model_shape(job.spec.model, job.spec.run.s3_endpoint));
  } catch (const std::exception& e) {
    job.memory_error = e.what();
  }
}

namespace {

// The nodes that hold one rank of a job with a memory plan, each copied with as many ram_slot
// slots as its RAM holds ranks (taken as much as the node itself, so that placement puts no more
// ranks on it), and what the search saw on the way, for the refusals.
struct memory_fit {
  std::vector<res::node_inventory> fitting;
  double largest_gpu = 0, largest_ram = 0;
  bool gpu_fits_somewhere = false, ram_fits_somewhere = false, any_node = false;
  std::int64_t rank_room = 0;  // ranks the fitting nodes' RAM holds together
};

memory_fit fit_nodes(const std::vector<res::node_inventory>& nodes, const config::job_spec& spec,
                     double gpu_limit_bytes, double device, double host) {
  memory_fit f;
  const bool gpu = spec.scaling.use_gpu;
  const std::int64_t ranks = spec.scaling.num_workers;
  for (const auto& node : nodes) {
    if (!node.alive()) continue;
    f.any_node = true;
    const double usable =
        train::usable_gpu_bytes(gpu_limit_bytes, static_cast<double>(node.gpu_memory_bytes()));
    const bool gpu_ok = !gpu || node.total().get("GPU") <= 0 || usable <= 0 || device <= usable;
    if (gpu && node.total().get("GPU") > 0) f.largest_gpu = std::max(f.largest_gpu, usable);
    const double ram = node_memory(node);
    f.largest_ram = std::max(f.largest_ram, ram);
    const bool ram_ok = ram <= 0 || host <= ram;
    f.gpu_fits_somewhere = f.gpu_fits_somewhere || gpu_ok;
    f.ram_fits_somewhere = f.ram_fits_somewhere || ram_ok;
    if (!gpu_ok || !ram_ok) continue;
    const std::int64_t slots = ram <= 0 ? ranks : static_cast<std::int64_t>(ram / host);
    res::node_inventory copy(node.name(),
                             node.total() + res::resource_set({{ram_slot, static_cast<double>(slots)}}));
    copy.reserve(node.total() - node.available());
    copy.set_gpu_memory_bytes(node.gpu_memory_bytes());
    f.fitting.push_back(std::move(copy));
    f.rank_room += slots;
  }
  return f;
}

// Why no node could hold the job's ranks, or "" when they may.
std::string unfit_reason(const memory_fit& f, const std::string& on_gpu, const std::string& in_ram,
                         const config::job_spec& spec) {
  if (!f.any_node) return "";
  if (!f.gpu_fits_somewhere)
    return on_gpu + " exceeds every node's GPU memory (largest: " + train::format_memory(f.largest_gpu) +
           "); " + gpu_advice(spec);
  if (!f.ram_fits_somewhere)
    return in_ram + " exceeds every node's memory (largest: " + train::format_memory(f.largest_ram) +
           "); try nodes with more memory or more workers";
  if (f.fitting.empty())
    return on_gpu + " and " + in_ram + " fit no single node (largest GPU " +
           train::format_memory(f.largest_gpu) + ", largest memory " + train::format_memory(f.largest_ram) +
           ")";
  const std::int64_t ranks = spec.scaling.num_workers;
  if (f.rank_room < ranks)
    return in_ram + ": the nodes' memory holds " + std::to_string(f.rank_room) + " of the " +
           std::to_string(ranks) + " ranks; try nodes with more memory";
  return "";
}

// Several ranks may share a node: their host RAM together (rank 0's export buffer included) must
// fit it, else the placement waits (PENDING) naming the node.
void check_shared_nodes(res::placement_result& result, const std::vector<res::node_inventory>& fitting,
                        double host, double rank0_extra) {
  std::map<std::string, double> need;
  const auto& nodes_of = result.plan.rank_nodes;
  for (std::size_t r = 0; r < nodes_of.size(); ++r) need[nodes_of[r]] += host + (r == 0 ? rank0_extra : 0);
  for (const auto& node : fitting) {
    const auto it = need.find(node.name());
    const double ram = node_memory(node);
    if (it == need.end() || ram <= 0 || it->second <= ram) continue;
    result.status = res::placement_status::pending;
    result.reason = "rank memory plan: node " + node.name() + " would hold ranks needing " +
                    train::format_memory(it->second) + " of host RAM; it has " + train::format_memory(ram);
    result.plan = {};
    return;
  }
}

}  // namespace

head_state::admission head_state::admit(const job_entry& job) const {
  return admit(job, schedulable());  // a draining node takes no new placement
}

head_state::admission head_state::admit(const job_entry& job,
                                        const std::vector<res::node_inventory>& nodes) const {
  admission out;
  const auto refuse = [&](const std::string& why) {
    out.refused = true;
    out.result.status = res::placement_status::infeasible;
    out.result.reason = "rank memory plan: " + why;
    return out;
  };
  if (!job.memory_error.empty()) return refuse(job.memory_error);
  if (!job.memory) {
    out.result = res::plan_job(job.spec, nodes);
    return out;
  }
  const auto& plan = *job.memory;
  const double device = plan.per_rank.device_bytes, host = plan.per_rank.host_bytes;
  const std::string on_gpu = train::format_memory(device) + " on the GPU per rank (" + plan.setting + ")";
  const std::string in_ram = train::format_memory(host) + " of host RAM per rank (" + plan.setting + ")";
  if (job.spec.scaling.use_gpu && job.gpu_limit_bytes > 0 && device > job.gpu_limit_bytes)
    return refuse(on_gpu + " exceeds the job's COHORT_GPU_MEMORY_LIMIT_GB of " +
                  train::format_memory(job.gpu_limit_bytes) + "; " + gpu_advice(job.spec));
  // Each worker process is held to its resources_per_worker.memory (its node kills it past it):
  // a plan above it would fail every attempt. Rank 0 also stages the export.
  const auto& per_worker = job.spec.scaling.resources_per_worker;
  if (auto it = per_worker.find("memory");
      it != per_worker.end() && it->second > 0 && host + plan.rank0_extra_host_bytes > it->second)
    return refuse(in_ram + " (rank 0 " + train::format_memory(host + plan.rank0_extra_host_bytes) +
                  " with the export) exceeds scaling.resources_per_worker.memory, " +
                  train::format_memory(it->second) +
                  ", to which each worker process is held; raise it, or use more workers (smaller shards per rank)");
  const memory_fit fit = fit_nodes(nodes, job.spec, job.gpu_limit_bytes, device, host);
  if (const std::string why = unfit_reason(fit, on_gpu, in_ram, job.spec); !why.empty()) return refuse(why);
  config::job_spec with_slots = job.spec;
  with_slots.scaling.resources_per_worker[ram_slot] = 1;
  out.result = res::plan_job(with_slots, fit.fitting);
  if (out.result.status != res::placement_status::placed) return out;
  out.result.plan.rank_bundles = res::job_bundles(job.spec.scaling);  // what the nodes reserve
  check_shared_nodes(out.result, fit.fitting, host, plan.rank0_extra_host_bytes);
  return out;
}

head_state::elastic_fit head_state::fit_elastic(const job_entry& job,
                                                const std::vector<res::node_inventory>& nodes,
                                                int least) const {
  elastic_fit out{admit(job, nodes), std::nullopt};
  if (out.admitted.refused || out.admitted.result.status == res::placement_status::placed) return out;
  const int wanted = job.spec.scaling.num_workers;
  for (int w = wanted - 1; least > 0 && w >= least; --w) {
    if ((std::int64_t{job.spec.train.grad_accum} * wanted) % w != 0) continue;
    job_entry trial;
    trial.spec = config::shrunk_to(job.spec, w);
    plan_memory(trial);
    auto fits = admit(trial, nodes);
    if (fits.refused || fits.result.status != res::placement_status::placed) continue;
    out.admitted = std::move(fits);
    out.fewer = trial.spec;
    break;
  }
  return out;
}

std::vector<trainer_setup> head_state::schedule() {
  std::vector<trainer_setup> starts;
  for (const auto& id : job_order_) {
    auto& job = jobs_.at(id);
    auto s = job.record.state;
    if ((s != job_state::pending && s != job_state::restarting) || job.held) continue;
    if (auto refusal = gpu_refusal(job.spec); !refusal.empty()) {
      job.record.state = job_state::failed;
      job.record.reason = refusal;
      continue;
    }
    // An elastic job (scaling.min_workers) that cannot get all its workers starts on fewer.
    const int wanted = job.spec.scaling.num_workers, least = job.spec.scaling.min_workers;
    auto [admitted, fewer] = fit_elastic(job, schedulable(), least);
    const auto& result = admitted.result;
    if (admitted.refused) {
      job.record.state = job_state::failed;
      job.record.reason = result.reason;
      continue;
    }
    if (result.status == res::placement_status::infeasible) {
      // It may fit once bigger or more nodes join: PENDING, saying why it cannot run now.
      job.record.state = job_state::pending;
      job.record.reason = infeasible_reason(job.spec, result.reason);
      continue;
    }
    if (result.status != res::placement_status::placed) {
      job.record.state = job_state::pending;
      job.record.reason = std::string(res::to_string(result.status)) + ": " + result.reason;
      continue;
    }
    res::reserve(result.plan, nodes_);
    std::string why;
    auto gpus = res::assign_gpus(result.plan, gpu_pools_, why);
    if (!gpus) {
      res::release(result.plan, nodes_);
      job.record.state = job_state::pending;
      job.record.reason = "pending: " + why + "; it waits until running jobs free GPUs";
      continue;
    }
    job.held = result.plan;
    job.gpus = *gpus;
    job.record.rank_gpus = *gpus;
    job.record.attempts += 1;
    job.record.trainer_node = result.plan.trainer_node;
    job.record.rank_nodes = result.plan.rank_nodes;
    job.record.reason = "starting attempt " + std::to_string(job.record.attempts);
    if (fewer)
      job.record.reason += " on " + std::to_string(fewer->scaling.num_workers) + " of " +
                           std::to_string(wanted) + " workers (scaling.min_workers " +
                           std::to_string(least) + "; train.grad_accum " +
                           std::to_string(fewer->train.grad_accum) + " keeps the global batch)";
    starts.push_back(trainer_setup{id, fewer ? *fewer : job.spec,
                                   job.record.attempts - 1,
                                   result.plan.trainer_node, result.plan.rank_nodes, job.gpus});
  }
  return starts;
}

void head_state::release(job_entry& job) {
  job.resizing.reset();             // a resize is of the attempt that ends here
  job.record.held_before_step = 0;  // the attempt that was held is over
  job.record.activity.clear();      // and what it was doing besides steps
  mirror_phase(job);
  if (!job.held) return;
  // Only nodes still registered get their share back; a node that re-registered meanwhile was
  // given its reservation again in add_node.
  res::release(*job.held, nodes_);
  res::release_gpus(*job.held, job.gpus, gpu_pools_);
  job.held.reset();
  job.gpus.clear();
  job.record.rank_gpus.clear();
}

std::string head_state::gpu_refusal(const config::job_spec& spec) const {
  const auto it = spec.scaling.resources_per_worker.find("GPU");
  const double need = it == spec.scaling.resources_per_worker.end() ? 0.0 : it->second;
  const bool any_alive =
      std::any_of(nodes_.begin(), nodes_.end(), [](const auto& n) { return n.alive(); });
  if (need <= 0 || !any_alive || need <= largest_gpu_offer_ + 1e-9) return "";
  const std::string head =
      "scaling.resources_per_worker.GPU " + res::format_quantity(need) + " per worker: ";
  if (largest_gpu_offer_ > 0)
    return head + "the largest node offers " + res::format_quantity(largest_gpu_offer_) + " GPUs";
  std::string notes;
  for (const auto& n : nodes_) {
    auto info = node_infos_.find(n.name());
    if (info != node_infos_.end() && !info->second.gpu_note.empty())
      notes += (notes.empty() ? "" : "; ") + n.name() + ": " + info->second.gpu_note;
  }
  return head + "no node of this cluster offers GPUs" + (notes.empty() ? "" : " (" + notes + ")");
}

std::string head_state::infeasible_reason(const config::job_spec& spec,
                                          const std::string& why) const {
  res::resource_set needs, has;
  for (const auto& bundle : res::job_bundles(spec.scaling)) needs += bundle;
  std::size_t alive = 0;
  std::string draining;
  for (const auto& n : nodes_) {
    if (!n.alive()) continue;
    if (draining_.count(n.name()) != 0) {
      draining += (draining.empty() ? "" : ", ") + n.name() + " (" + draining_.at(n.name()) + ")";
      continue;
    }
    has += n.total();
    ++alive;
  }
  return "infeasible on the current cluster: needs " + std::to_string(spec.scaling.num_workers) +
         " workers, " + needs.to_string() + " in all; has " + std::to_string(alive) +
         " alive nodes, " + has.to_string() + " in all (" + why + ")" +
         (draining.empty() ? "" : "; draining, so taking no new placement: " + draining) +
         "; it waits PENDING until nodes that can hold it join";
}

std::vector<double> head_state::gpu_use(const std::string& node) const {
  auto it = gpu_pools_.find(node);
  if (it == gpu_pools_.end()) return {};
  std::vector<double> out;
  for (std::int32_t i = 0; i < it->second.size(); ++i) out.push_back(it->second.used(i));
  return out;
}

void head_state::record_failure(job_entry& job, const failure_cause& cause) {
  job.record.failures.push_back(cause);
  ++job.failures_counted;
  const int max_failures = job.spec.run.failure.max_failures;
  const int restarts_used = job.failures_counted - 1;
  std::string where = cause.rank >= 0 ? "worker rank " + std::to_string(cause.rank) + " on node " +
                                            cause.node
                                      : "trainer on node " + cause.node;
  if (cause.kind == failure_kind::bad_input) {
    // The job's own input: every restart would fail the same way.
    job.record.state = job_state::failed;
    job.record.reason = "bad input: " + where + " failed setting up: " + cause.reason +
                        " (no restart can fix this; failure.max_failures does not apply)";
  } else if (max_failures == -1 || restarts_used < max_failures) {
    job.record.state = job_state::restarting;
    job.record.reason = where + " failed (" + cause.reason + "); restarting the worker group";
  } else {
    job.record.state = job_state::failed;
    job.record.reason = where + " failed: " + cause.reason + " (failure.max_failures=" +
                        std::to_string(max_failures) + " exhausted)";
  }
}

head_state::job_entry& head_state::entry(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) throw std::out_of_range("unknown job " + job_id);
  return it->second;
}

const job_record& head_state::on_outcome(const attempt_outcome& outcome) {
  auto& job = entry(outcome.job_id);
  if (is_terminal(job.record.state) || outcome.attempt != job.record.attempts - 1)
    return job.record;  // a late report from an attempt already settled
  if (!job.held) return job.record;  // already ended here (preempted, stopped)
  release(job);
  if (outcome.succeeded) {
    job.preempting.reset();
    job.record.state = job_state::succeeded;
    job.record.reason = "all " + std::to_string(job.record.rank_nodes.size()) +
                        " workers finished";
  } else if (job.preempting && outcome.cause.kind == failure_kind::retryable) {
    record_preemption(job);  // a rank lost to the leaving node is no rank's fault
  } else {
    job.preempting.reset();
    record_failure(job, outcome.cause);
  }
  mirror_phase(job);
  return job.record;
}

const job_record& head_state::on_trainer_lost(const std::string& job_id, std::int32_t attempt,
                                              const std::string& reason) {
  auto& job = entry(job_id);
  if (is_terminal(job.record.state) || attempt != job.record.attempts - 1) return job.record;
  if (!job.held) return job.record;  // already ended here (preempted, stopped)
  job.awaiting_adoption = false;
  release(job);
  if (job.preempting) {
    record_preemption(job);  // the trainer went with the leaving node
    return job.record;
  }
  record_failure(job, failure_cause{attempt, -1, job.record.trainer_node, reason});
  return job.record;
}

bool head_state::stop(const std::string& job_id, const std::string& reason) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || is_terminal(it->second.record.state)) return false;
  release(it->second);
  it->second.preempting.reset();
  mirror_phase(it->second);
  it->second.record.state = job_state::stopped;
  it->second.record.reason = reason;
  return true;
}

void head_state::on_running(const std::string& job_id, std::int32_t attempt, std::int64_t now_ms) {
  auto& job = entry(job_id);
  if (is_terminal(job.record.state) || attempt != job.record.attempts - 1) return;
  // An attempt this head gave up (its node was lost, yet its processes went on behind a
  // partition) is not the job's again when its trainer says it runs: the job waits for placement.
  if (!job.held) return;
  if (job.record.state != job_state::running) job.running_since_ms = now_ms;
  job.record.state = job_state::running;
  job.record.reason = "attempt " + std::to_string(attempt + 1) + ": all " +
                      std::to_string(job.record.rank_nodes.size()) + " workers running";
}

bool head_state::on_progress(const progress_report& report) {
  auto it = jobs_.find(report.job_id);
  if (it == jobs_.end()) return false;
  // A zombie (an older attempt still running after a newer one started) reports nothing here:
  // its steps and checkpoints are not the job's.
  if (report.attempt != it->second.record.attempts - 1) return false;
  it->second.record.step = report.step;
  it->second.record.total_steps = report.total_steps;
  it->second.record.loss = report.loss;
  if (report.checkpoint_step > 0) it->second.record.checkpoint_step = report.checkpoint_step;
  if (report.eval_step > 0) {
    it->second.record.eval_step = report.eval_step;
    it->second.record.eval_loss = report.eval_loss;
    it->second.record.eval_perplexity = report.eval_perplexity;
  }
  // A report that arrives after the attempt ended (stopped while held) holds nothing any more.
  it->second.record.held_before_step = it->second.held ? report.held_before_step : 0;
  if (it->second.preempting && !report.no_emergency_save.empty())
    it->second.preempting->declined = report.no_emergency_save;
  it->second.record.activity = is_terminal(it->second.record.state) ? "" : report.activity;
  return true;
}

const job_record* head_state::find(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second.record;
}

const config::job_spec* head_state::spec(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second.spec;
}

std::vector<job_record> head_state::jobs() const {
  std::vector<job_record> out;
  for (const auto& id : job_order_) out.push_back(jobs_.at(id).record);
  return out;
}

std::vector<const job_record*> head_state::records() const {
  std::vector<const job_record*> out;
  out.reserve(job_order_.size());
  for (const auto& id : job_order_) out.push_back(&jobs_.at(id).record);
  return out;
}

std::map<std::string, double> head_state::available(const std::string& node) const {
  for (const auto& n : nodes_)
    if (n.name() == node) return n.available().quantities();
  return {};
}

memory_plan plan_rank_memory(const config::job_spec& spec) {
  memory_plan out;
  if (!config::trains_model(spec.workload)) return out;
  const auto e =
      core::train::estimate_memory(spec, core::train::read_model_shape(spec.model, spec.run.s3_endpoint));
  const auto& r = e.per_rank;
  out.known = true;
  out.parameters = e.model.parameters;
  out.setting = e.setting;
  out.device_bytes = r.device_bytes;
  out.host_bytes = r.host_bytes;
  out.steady_host_bytes = r.steady_host_bytes;
  out.load_peak_host_bytes = r.load_peak_host_bytes;
  out.activation_bytes = r.activation_bytes;
  for (const auto& i : r.items) out.items.push_back({i.name, i.bytes, i.on_device ? "gpu" : "host"});
  out.cuda_context_bytes = spec.scaling.use_gpu ? core::train::cuda_context_bytes : 0.0;
  out.rank0_extra_host_bytes = e.rank0_extra_host_bytes;
  return out;
}

}  // namespace cohort::actors

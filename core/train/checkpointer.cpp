// checkpointer: the resume choice, saves, store-carried reports and rank 0's commit + retention.
#include "core/train/checkpointer.hpp"

#include <chrono>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <thread>

#include "core/ckpt/attempt_claim.hpp"
#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/reader.hpp"
#include "core/ckpt/replica.hpp"
#include "core/ckpt/retention.hpp"
#include "core/comm/tcp_store.hpp"
#include "core/train/checkpoint_request.hpp"
#include "core/train/memory_estimate.hpp"
#include "core/train/peer_replicas.hpp"
#include "core/train/run_control.hpp"
#include "core/train/test_hooks.hpp"

namespace cohort::core::train {

namespace {

// How long rank 0 waits for the other ranks' reports of one checkpoint (large shards on slow disks).
constexpr auto report_wait_limit = std::chrono::hours(1);
constexpr auto resume_wait_limit = std::chrono::minutes(30);

// The bytes free to this process on the file system that holds `path` (or its nearest existing
// parent), or what the test hook says (test_disk_free_bytes).
std::uint64_t free_bytes_at(std::filesystem::path path) {
  if (const auto free = test_disk_free_bytes()) return *free;
  std::error_code ec;
  while (!path.empty() && !std::filesystem::exists(path, ec)) path = path.parent_path();
  const auto space = std::filesystem::space(path.empty() ? "." : path, ec);
  return ec ? std::numeric_limits<std::uint64_t>::max() : space.available;  // unknown: not refused
}

// Refuses, before a byte is written, a rank's shard of `bytes` that the file system of `dir`
// cannot hold, naming both sizes: a full disk fails the save at once instead of after writing what
// fits (a 7B shard is ~77 GB). The ranks of one node check each its own shard, so this catches a
// shard that cannot fit alone, not one that fits only until the others are written.
void refuse_without_room(const std::string& dir, std::uint64_t step, int rank, std::uint64_t bytes) {
  const auto free = free_bytes_at(dir);
  if (bytes <= free) return;
  throw std::runtime_error("checkpoint of step " + std::to_string(step) + ": rank " + std::to_string(rank) +
                           "'s shard needs " + format_memory(static_cast<double>(bytes)) +
                           " but the file system of " + dir + " has " +
                           format_memory(static_cast<double>(free)) +
                           " free, so none of it was written (the newest committed checkpoint stays): free "
                           "space there or set run.storage_path (run.local_dir with S3) on a larger disk");
}

// Polls until `key` is set; throws when `stop` returns a reason or the limit passes.
template <class Stop>
std::string wait_key(comm::store& store, const std::string& key, std::chrono::milliseconds limit, Stop stop) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!store.check({key})) {
    stop();
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("checkpoint: no answer under store key " + key + " in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return store.get(key, std::chrono::seconds(10));
}

}  // namespace

std::unique_ptr<ckpt::checkpoint_location> open_checkpoints(const worker_context& ctx,
                                                            const std::string& cache_dir) {
  if (ctx.remote_run.empty()) return ckpt::local_checkpoints(ctx.run_dir);
  std::unique_ptr<storage::s3_client> client;
  try {
    client =
        std::make_unique<storage::s3_client>(storage::s3_config_from_environment(ctx.spec.run.s3_endpoint));
  } catch (const std::invalid_argument& e) {
    throw bad_input_error(std::string("run.storage_path ") + ctx.remote_run + ": " + e.what());
  }
  return ckpt::s3_checkpoints(std::move(client), storage::parse_s3_url(ctx.remote_run, "run.storage_path"),
                              cache_dir);
}

checkpointer::checkpointer(const worker_context& ctx)
    : ctx_(ctx),
      location_(open_checkpoints(ctx, ctx.run_dir + "/s3-cache/rank-" + std::to_string(ctx.rank))) {
  const auto address = comm::parse_host_port(ctx.store_address);
  store_ = std::make_unique<comm::tcp_store>(address.host, address.port, ctx.store_secret);
  if (ctx.spec.run.checkpoint.replicate) replicas_ = std::make_unique<peer_replicas>(ctx, *store_);
}

checkpointer::~checkpointer() {
  abandoned_ = true;
  try {
    writer_.wait();
  } catch (const std::exception&) {
    // The attempt is ending on another error; an unfinished checkpoint stays uncommitted.
  }
}

std::string checkpointer::key(const std::string& name) const {
  return checkpoint_key_prefix(ctx_.job_id, ctx_.attempt) + name;
}

bool checkpointer::take_request() {
  if (ctx_.rank != 0 || ctx_.signals == nullptr) return false;
  const std::int64_t requested = ctx_.signals->checkpoint_requests.load();
  if (requested <= requests_taken_) return false;
  requests_taken_ = requested;  // several requests before one step make one checkpoint
  return true;
}

bool checkpointer::preempted() const {
  return ctx_.rank == 0 && ctx_.signals != nullptr && ctx_.signals->preempted.load();
}

ckpt::retention_policy checkpointer::policy(bool writer_running) const {
  const auto& c = ctx_.spec.run.checkpoint;
  ckpt::retention_policy p;
  p.num_to_keep = c.num_to_keep;
  p.score_attribute = c.score_attribute;
  p.score_order = config::to_string(c.order);
  if (restored_step_) p.protect_steps.insert(*restored_step_);
  p.writer_running = writer_running;
  return p;
}

void checkpointer::log(const std::string& line) const {
  if (ctx_.log) ctx_.log(line);
}

std::vector<nlohmann::json> checkpointer::every_rank(const std::string& prefix) {
  std::vector<nlohmann::json> out;
  for (int r = 0; r < ctx_.world_size; ++r)
    out.push_back(nlohmann::json::parse(wait_key(*store_, key(prefix + std::to_string(r)), resume_wait_limit,
                                                 [this] { check_cancelled(ctx_.cancelled); })));
  return out;
}

nlohmann::json checkpointer::agree_on_resume(const std::string& name, bool replica_steps) {
  if (ctx_.rank != 0) {
    auto choice = nlohmann::json::parse(
        wait_key(*store_, key(name), resume_wait_limit, [this] { check_cancelled(ctx_.cancelled); }));
    if (choice.contains("error"))
      throw std::runtime_error("rank 0 could not choose a checkpoint: " + choice["error"].get<std::string>());
    return choice;
  }
  nlohmann::json choice;
  try {
    choice = pick_resume(replica_steps);
  } catch (const std::exception& e) {
    store_->set(key(name), nlohmann::json{{"error", e.what()}}.dump());
    throw;
  }
  store_->set(key(name), choice.dump());
  return choice;
}

std::optional<resume_point> checkpointer::choose_resume() {
  // What each rank's node keeps in memory, for rank 0's restore plan.
  if (replicas_ && ctx_.attempt > 0)
    store_->set(key("replicas/rank-" + std::to_string(ctx_.rank)), replicas_->holdings().dump());
  auto choice = agree_on_resume("resume", true);
  if (choice.value("replica", false)) {
    if (auto r = restore_replica_step(choice)) {
      // The run's checkpoints stand where they stood: the newest committed one (0: none).
      const auto committed = choice["committed"].get<std::uint64_t>();
      if (committed > 0) restored_step_ = committed;  // kept by retention, as a restored one is
      committed_step_ = static_cast<std::int64_t>(committed);
      return r;
    }
    choice = agree_on_resume("resume-committed", false);
  }
  if (!choice.contains("dir")) return std::nullopt;
  resume_point r;
  if (choice.contains("peer")) {
    r = restore_from_peers(choice);
  } else {
    // Rank 0 verified the copy it chose from; each other rank fetches what it reads (from S3:
    // with the step's world size its own files, checked) into a copy of its own.
    const ckpt::resuming_rank me{ctx_.rank, ctx_.world_size};
    r.dir = ctx_.rank == 0 ? choice["dir"].get<std::string>()
                           : location_->fetch(choice["step"].get<std::uint64_t>(), me, {});
    r.manifest = ckpt::read_manifest(r.dir);
    std::uint64_t read = 0;  // rank 0 read every file to verify them; a rank reads what it restores
    for (const auto& f : r.manifest.files)
      if (ctx_.rank == 0 || me.reads(r.manifest, f)) read += f.size;
    log("rank " + std::to_string(ctx_.rank) + ": restoring step " + std::to_string(r.manifest.step) +
        " from storage: " + std::to_string(read) + " bytes of checkpoint files read from storage");
  }
  restored_step_ = r.manifest.step;
  committed_step_ = static_cast<std::int64_t>(r.manifest.step);
  if (const auto& s = r.manifest.extra; s.is_object() && s.contains("save") && s["save"].is_object()) {
    std::lock_guard<std::mutex> lock(save_mutex_);
    last_save_ = save_record{s["save"].value("seconds", 0.0), s["save"].value("bytes", std::uint64_t{0}),
                             s["save"].value("rank", 0)};
  }
  return r;
}

nlohmann::json checkpointer::pick_resume(bool replica_steps) {
  nlohmann::json choice = nlohmann::json::object();
  const ckpt::attempt_token token{ctx_.job_id, ctx_.attempt};
  // From now on only this attempt commits the job's checkpoints (a zombie older one is refused).
  if (!claimed_) location_->claim(token);
  claimed_ = true;
  const bool resume = ctx_.attempt > 0 || ctx_.spec.run.resume;
  if (!resume) {
    const auto committed = location_->committed();
    if (!committed.empty())
      throw std::invalid_argument("run.resume is false, but " + location_->where() +
                                  " holds committed checkpoints (newest " +
                                  ckpt::step_dir_name(committed.back().step) +
                                  "); choose another run.name or run.storage_path, or remove them");
  } else if (replicas_ && ctx_.attempt > 0) {
    if (auto peer = pick_peer_resume(replica_steps); !peer.empty()) {
      location_->retain(policy(false));  // dead attempts' unfinished directories
      return peer;
    }
  }
  if (resume) {
    const auto latest = location_->latest_valid();
    for (const auto& r : latest.rejected) {
      if (!r.committed) {  // an unfinished save: removed below
        log("checkpoint " + r.path + " skipped: " + r.reason);
        continue;
      }
      // Committed but damaged: out of the way of the step that will be written again.
      log("checkpoint " + r.path + " rejected: " + r.reason + " (" + location_->set_aside(r) + ")");
    }
    if (latest.checkpoint) {
      const std::uint64_t step = latest.checkpoint->step;
      choice["dir"] = latest.checkpoint->path;
      choice["step"] = step;
      restored_step_ = step;
      const std::string name = location_->step_name(step), copy = latest.checkpoint->path;
      log("resuming from " + name + (copy != name ? " (verified copy in " + copy + ")" : ""));
    }
  }
  location_->retain(policy(false));  // dead attempts' unfinished directories
  return choice;
}

namespace {

// The ranks a restore plan (ckpt::plan_sources) finds no copy for, and those whose copy moves over
// the network ("1 from rank 3, ..."), for the log.
struct plan_text {
  std::string missing, moved;
};
plan_text describe_plan(const std::vector<int>& sources) {
  plan_text t;
  for (int r = 0; r < static_cast<int>(sources.size()); ++r) {
    if (sources[r] < 0)
      t.missing += (t.missing.empty() ? "" : ", ") + std::to_string(r);
    else if (sources[r] != r)
      t.moved +=
          (t.moved.empty() ? "" : ", ") + std::to_string(r) + " from rank " + std::to_string(sources[r]);
  }
  return t;
}

// Where this rank's copy came from, for its restore line: its node, or `source`'s copy received.
std::string copy_source_text(int rank, int source, std::uint64_t received) {
  return source == rank ? "its node's memory"
                        : "rank " + std::to_string(source) + "'s copy (" + std::to_string(received) +
                              " bytes over the network)";
}

std::string where_copies_are(const plan_text& t) {
  return t.moved.empty() ? ": every rank's own node holds its shard)"
                         : "; over the network: rank " + t.moved + ")";
}

}  // namespace

nlohmann::json checkpointer::pick_peer_resume(bool replica_steps) {
  const auto storage = [this](const std::string& why) {
    log("peer replicas not used: " + why + "; restoring from storage");
    return nlohmann::json::object();
  };
  if (!ctx_.remote_run.empty())
    return storage("the checkpoints are in S3 (replicas serve a run directory on disk)");
  const auto committed = location_->committed();
  const bool between = replica_steps && ctx_.spec.run.checkpoint.replicate_every > 0;
  if (committed.empty() && !between) return nlohmann::json::object();
  std::vector<std::vector<ckpt::replica_record>> held;
  for (const auto& holdings : every_rank("replicas/rank-")) {
    held.emplace_back();
    for (const auto& j : holdings) held.back().push_back(ckpt::replica_record_from_json(j));
  }
  if (between)
    if (auto newer = pick_replica_step(held, committed.empty() ? 0 : committed.back().step); !newer.empty())
      return newer;
  if (committed.empty()) return nlohmann::json::object();
  const std::uint64_t step = committed.back().step;
  ckpt::manifest m;
  try {
    m = ckpt::read_manifest(ckpt::step_dir(ctx_.run_dir, step));
  } catch (const std::exception& e) {
    return storage(e.what());
  }
  if (m.world_size != ctx_.world_size)
    return storage(location_->step_name(step) + " was written by " + std::to_string(m.world_size) +
                   " ranks, this attempt has " + std::to_string(ctx_.world_size));
  const auto sources = ckpt::plan_sources(held, step, ctx_.world_size);
  const auto plan = describe_plan(sources);
  if (!plan.missing.empty())
    return storage("no node of this attempt holds a copy of " + location_->step_name(step) + " for rank(s) " +
                   plan.missing);
  restored_step_ = step;
  log("resuming from " + location_->step_name(step) + " from the nodes' memory (peer replicas" +
      where_copies_are(plan));
  return {{"dir", ckpt::step_dir(ctx_.run_dir, step)}, {"step", step}, {"peer", sources}};
}

nlohmann::json checkpointer::pick_replica_step(const std::vector<std::vector<ckpt::replica_record>>& held,
                                               std::uint64_t after) {
  const std::string committed = after > 0 ? "the newest committed checkpoint, " + location_->step_name(after)
                                          : "no committed checkpoint";
  for (const auto step : ckpt::replica_steps_after(held, after, ctx_.world_size)) {
    const auto sources = ckpt::plan_sources(held, step, ctx_.world_size);
    const auto plan = describe_plan(sources);
    if (!plan.missing.empty()) {
      log("replica step " + std::to_string(step) + " not used: no node of this attempt holds a complete " +
          "copy of it for rank(s) " + plan.missing);
      continue;
    }
    log("resuming from replica step " + std::to_string(step) + " (run.checkpoint.replicate_every; " +
        committed + ") from the nodes' memory (peer replicas" + where_copies_are(plan));
    return {{"dir", replicas_->step_dir(step)},
            {"step", step},
            {"peer", sources},
            {"replica", true},
            {"committed", after}};
  }
  return nlohmann::json::object();
}

std::optional<resume_point> checkpointer::restore_replica_step(const nlohmann::json& choice) {
  const auto step = choice["step"].get<std::uint64_t>();
  const auto sources = choice["peer"].get<std::vector<int>>();
  resume_point r{replicas_->step_dir(step), {}};
  const std::uint64_t received = replicas_->gather(step, sources);
  std::string why;  // this rank's copy checked against the replica's own manifest
  try {
    r.manifest = ckpt::read_replica_manifest(r.dir);
    why = ckpt::check_replica(r.dir, r.manifest, ctx_.rank);
  } catch (const std::exception& e) {
    why = e.what();
  }
  // Every rank learns whether every copy can be used: all restore from the step, or none does.
  const std::string checked = "replica-restore/" + ckpt::step_dir_name(step) + "/rank-";
  store_->set(key(checked + std::to_string(ctx_.rank)), nlohmann::json{{"why", why}}.dump());
  std::string unusable;
  const auto answers = every_rank(checked);
  for (int rank = 0; rank < ctx_.world_size; ++rank) {
    const auto other = answers[static_cast<std::size_t>(rank)].value("why", std::string());
    if (!other.empty())
      unusable += (unusable.empty() ? "rank " : "; rank ") + std::to_string(rank) + ": " + other;
  }
  const std::string rank = "rank " + std::to_string(ctx_.rank);
  if (!unusable.empty()) {
    std::error_code ec;
    if (!why.empty()) std::filesystem::remove(r.dir + "/" + ckpt::replica_record_name(ctx_.rank), ec);
    if (ctx_.rank == 0)
      log("replica step " + std::to_string(step) + " cannot be restored (" + unusable +
          "); resuming from the committed checkpoints instead");
    return std::nullopt;
  }
  log(rank + ": restoring replica step " + std::to_string(step) + " from " +
      copy_source_text(ctx_.rank, sources[ctx_.rank], received) +
      ": 0 bytes of checkpoint files read from storage");
  return r;
}

resume_point checkpointer::restore_from_peers(const nlohmann::json& choice) {
  const auto step = choice["step"].get<std::uint64_t>();
  const auto sources = choice["peer"].get<std::vector<int>>();
  const std::string stored = ckpt::step_dir(ctx_.run_dir, step);
  resume_point r{replicas_->step_dir(step), ckpt::read_manifest(stored)};
  const std::uint64_t received = replicas_->gather(step, sources);
  const std::string rank = "rank " + std::to_string(ctx_.rank);
  if (const auto why = ckpt::check_replica(r.dir, r.manifest, ctx_.rank); !why.empty()) {
    // This rank's copy is not the committed one: its own shard from storage, checked first.
    if (const auto bad = ckpt::mismatched_files(stored, r.manifest, ctx_.rank); !bad.empty())
      throw ckpt::ckpt_error(ckpt::ckpt_errc::bad_manifest, location_->step_name(step) + ": " + bad);
    std::uint64_t read = 0;
    for (const auto& f : r.manifest.files) read += f.rank == ctx_.rank ? f.size : 0;
    log(rank + ": its replica of step " + std::to_string(step) + " cannot be used (" + why +
        "); restoring its shard from storage: " + std::to_string(read) +
        " bytes of checkpoint files read from storage");
    r.dir = stored;
    return r;
  }
  log(rank + ": restoring step " + std::to_string(step) + " from " +
      copy_source_text(ctx_.rank, sources[ctx_.rank], received) +
      ": 0 bytes of checkpoint files read from storage");
  return r;
}

bool checkpointer::due(std::int64_t step, std::int64_t total_steps) const {
  const auto& c = ctx_.spec.run.checkpoint;
  return (c.final && step == total_steps) || (c.every_steps > 0 && step % c.every_steps == 0);
}

bool checkpointer::replica_due(std::int64_t step) const {
  const int every = ctx_.spec.run.checkpoint.replicate_every;
  return replicas_ && every > 0 && step % every == 0;
}

void checkpointer::replicate(std::uint64_t step, const std::vector<ckpt::shard_tensor>& tensors,
                             const ckpt::rank_state& state, const nlohmann::json& metrics,
                             const nlohmann::json& extra) {
  // A save for the hang detector (judged by its heartbeats, no bytes counted: they go to memory).
  phase_scope saving(ctx_.activity, rank_phase::saving);
  const auto line = replicas_->save(step, tensors, state, metrics, extra);
  if (!replica_logged_) log(line);  // once an attempt: how the shards are kept
  replica_logged_ = true;
}

bool checkpointer::save(std::uint64_t step, std::vector<ckpt::shard_tensor> tensors, ckpt::rank_state state,
                        const nlohmann::json& metrics, const nlohmann::json& extra) {
  finish();  // the previous save, if it is still being written; logs the commits made so far
  const std::uint64_t bytes = ckpt::shard_bytes(tensors);
  const std::string dir = ckpt::step_dir(ctx_.run_dir, step);
  refuse_without_room(dir, step, ctx_.rank, bytes);
  if (ctx_.activity) ctx_.activity->start_write(static_cast<std::int64_t>(step), bytes);
  const auto& spec = ctx_.spec.run.checkpoint;
  const auto started = std::chrono::steady_clock::now();  // the replicas are part of the timed save
  if (replicas_) replicate(step, tensors, state, metrics, extra);
  const auto on_written = [this, metrics, extra, started, bytes](const ckpt::rank_report& r) {
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    publish_and_commit(r, metrics, extra, took + test_save_seconds_added(), bytes);
  };
  if (spec.async && bytes <= static_cast<std::uint64_t>(spec.staging_bytes)) {
    writer_.submit(dir, ctx_.rank, ckpt::stage_tensors(tensors), std::move(state), on_written, write_options());
    return true;
  }
  if (spec.async && !staging_note_logged_) {
    staging_note_logged_ = true;
    log("rank " + std::to_string(ctx_.rank) + ": its checkpoint shard (" + std::to_string(bytes >> 20) +
        " MiB) exceeds run.checkpoint.staging_bytes (" + std::to_string(spec.staging_bytes >> 20) +
        " MiB): it is written in the foreground, streamed");
  }
  // In the foreground, from where the state lies: the heartbeat says so, with the bytes written.
  phase_scope saving(ctx_.activity, rank_phase::saving);
  // Where a test holds a rank inside its save (no byte written yet), in one attempt (1-based).
  test_pause_point("save-" + ckpt::step_dir_name(step) + "-rank-" + std::to_string(ctx_.rank) + "-attempt-" +
                       std::to_string(ctx_.attempt + 1),
                   ctx_.cancelled);
  on_written(ckpt::write_rank_shard(dir, ctx_.rank, tensors, state, write_options()));
  log_commits();
  return false;
}

ckpt::write_options checkpointer::write_options() const {
  ckpt::write_options o;
  if (auto* activity = ctx_.activity) o.on_bytes = [activity](std::uint64_t n) { activity->add_bytes(n); };
  return o;
}

void checkpointer::finish() {
  // Waiting for a background save: its write, or (rank 0) the other ranks' shards it waits for
  // before the commit. The writer thread sets committing_ before it moves a saving rank on, and
  // this reads it after setting the phase, so that neither misses the other.
  const bool waits = writer_.busy();
  phase_scope saving(waits ? ctx_.activity : nullptr, rank_phase::saving);
  if (waits && ctx_.activity && committing_.load())
    ctx_.activity->advance_phase(rank_phase::saving, rank_phase::committing);
  writer_.wait();
  log_commits();
}

void checkpointer::drop_replicas() {
  if (replicas_) replicas_->drop();
}

std::optional<save_record> checkpointer::last_save() const {
  std::lock_guard<std::mutex> lock(save_mutex_);
  return last_save_;
}

void checkpointer::publish_and_commit(const ckpt::rank_report& report, const nlohmann::json& metrics,
                                      const nlohmann::json& extra, double seconds,
                                      std::uint64_t bytes_written) {
  const std::string step_name = ckpt::step_dir_name(report.step);
  const auto dir = ckpt::step_dir(ctx_.run_dir, report.step);
  // The upload (S3) counts on top of the write: a long one is progress to the hang detector too.
  location_->publish(dir, report, count_after(ctx_.activity));
  auto published = ckpt::rank_report_to_json(report);
  published["save_seconds"] = seconds;  // for rank 0's record of the slowest save
  published["save_bytes"] = bytes_written;
  store_->set(key(step_name + "/rank-" + std::to_string(report.rank)), published.dump());
  if (ctx_.rank != 0) return;
  // A rank 0 that waits for this save (not one training on beside an asynchronous write) now
  // waits for the other ranks' shards: its heartbeat says so, and it is not judged by progress.
  committing_ = true;
  struct reset {
    std::atomic<bool>& flag;
    ~reset() { flag = false; }
  } committed{committing_};
  if (ctx_.activity) ctx_.activity->advance_phase(rank_phase::saving, rank_phase::committing);
  std::vector<ckpt::rank_report> reports;
  save_record slowest;
  for (int r = 0; r < ctx_.world_size; ++r) {
    const auto text = wait_key(*store_, key(step_name + "/rank-" + std::to_string(r)), report_wait_limit, [&] {
      if (abandoned_ || (ctx_.cancelled != nullptr && ctx_.cancelled->load()))
        throw std::runtime_error("checkpoint " + step_name + " abandoned: the attempt ended");
    });
    const auto j = nlohmann::json::parse(text);
    reports.push_back(ckpt::rank_report_from_json(j));
    if (const double s = j.value("save_seconds", 0.0); r == 0 || s > slowest.seconds)
      slowest = save_record{s, j.value("save_bytes", std::uint64_t{0}), r};
  }
  auto recorded = extra;
  recorded["save"] = {{"seconds", slowest.seconds}, {"bytes", slowest.bytes}, {"rank", slowest.rank}};
  // Every rank's files are written, nothing committed yet: where a test kills the committer.
  test_pause_point("commit-" + step_name, ctx_.cancelled);
  const ckpt::attempt_token token{ctx_.job_id, ctx_.attempt};
  // A zombie attempt's commit throws stale_attempt, which ends this rank's run saying so.
  const auto m = location_->commit(dir, report.step, ctx_.world_size, reports, metrics, recorded, &token);
  committed_step_ = static_cast<std::int64_t>(report.step);
  {
    std::lock_guard<std::mutex> lock(save_mutex_);
    last_save_ = slowest;
  }
  // The reports are in the manifest now: the store keeps O(world) keys however many checkpoints.
  for (int r = 0; r < ctx_.world_size; ++r) store_->remove(key(step_name + "/rank-" + std::to_string(r)));
  std::string hooked;
  const auto local = location_->local_copy(report.step);
  if (on_commit_ && local) {
    if (ctx_.activity) ctx_.activity->advance_phase(rank_phase::committing, rank_phase::exporting);
    hooked = on_commit_(report.step, *local, m.metrics);
  }
  std::uint64_t bytes = 0;
  for (const auto& f : m.files) bytes += f.size;
  const auto kept = location_->retain(policy(true));
  std::string note = "checkpoint " + location_->step_name(report.step) + " committed (" +
                     std::to_string(bytes >> 10) + " KiB, " + std::to_string(m.files.size()) + " files)";
  if (!kept.deleted.empty()) note += "; retention removed " + std::to_string(kept.deleted.size()) + " older";
  std::lock_guard<std::mutex> lock(notes_mutex_);
  notes_.push_back(note);
  if (!hooked.empty()) notes_.push_back(hooked);
}

void checkpointer::log_commits() {
  std::vector<std::string> notes;
  {
    std::lock_guard<std::mutex> lock(notes_mutex_);
    notes.swap(notes_);
  }
  for (const auto& n : notes) log(n);
}

}  // namespace cohort::core::train

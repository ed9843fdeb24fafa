// peer_replicas: the own copy written at each save, the buddy's sent over the replicas' Gloo group
// a chunk at a time, and the restore plan's copies moved to the ranks that need them.
#include "core/train/peer_replicas.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/replica.hpp"
#include "core/comm/gloo_process_group.hpp"
#include "core/comm/store.hpp"
#include "core/train/run_control.hpp"
#include "core/train/test_hooks.hpp"

namespace cohort::core::train {

namespace {

namespace fs = std::filesystem;

constexpr std::size_t header_bytes = 4096;
constexpr std::size_t chunk_bytes = std::size_t{64} << 20;
constexpr std::uint64_t slot_base = std::uint64_t{1} << 62;

// The slot of chunk `c` (0: the header) of transfer channel `channel`.
std::uint64_t slot_of(std::uint64_t channel, std::uint64_t c) { return slot_base + (channel << 24) + c; }

// A rank's replica files, in the order they travel: the shard, and with `whole` the step's
// manifest and the record (last).
std::vector<std::string> replica_files(int rank, bool whole) {
  if (!whole) return {ckpt::rank_shard_name(rank), ckpt::rank_state_name(rank)};
  return {ckpt::rank_shard_name(rank), ckpt::rank_state_name(rank), ckpt::manifest_name,
          ckpt::replica_record_name(rank)};
}

// Files read, or written, one after another as one stream of bytes.
class file_sequence {
 public:
  // `part`: the suffix of the names a written file has until finish() (unique to the transfer:
  // two ranks of a node may receive the same step's manifest at once).
  file_sequence(std::string dir, std::vector<std::pair<std::string, std::uint64_t>> files, bool write,
                std::string part = ".part")
      : dir_(std::move(dir)), files_(std::move(files)), write_(write), part_(std::move(part)) {}

  std::uint64_t total() const {
    std::uint64_t n = 0;
    for (const auto& f : files_) n += f.second;
    return n;
  }
  // Reads (or writes) the next `n` bytes at `p`.
  void next(char* p, std::uint64_t n) {
    while (n > 0) {
      if (!stream_.is_open()) open_next();
      const std::uint64_t take = std::min(n, files_[index_].second - offset_);
      if (write_)
        stream_.write(p, static_cast<std::streamsize>(take));
      else
        stream_.read(p, static_cast<std::streamsize>(take));
      if (!stream_)
        throw ckpt::ckpt_error(ckpt::ckpt_errc::io,
                               "replica: cannot " + std::string(write_ ? "write " : "read ") + path(index_));
      p += take, n -= take, offset_ += take;
      if (offset_ == files_[index_].second) stream_.close(), ++index_, offset_ = 0;
    }
  }
  // Written: renames every file from its .part name into place, the record (last) last.
  void finish() {
    while (index_ < files_.size() && files_[index_].second == 0) open_next(), stream_.close(), ++index_;
    for (std::size_t i = 0; i < files_.size(); ++i) fs::rename(path(i) + part_, path(i));
  }

 private:
  std::string path(std::size_t i) const { return dir_ + "/" + files_[i].first; }
  void open_next() {
    if (write_)
      stream_.open(path(index_) + part_, std::ios::binary | std::ios::trunc | std::ios::out);
    else
      stream_.open(path(index_), std::ios::binary | std::ios::in);
    if (!stream_) throw ckpt::ckpt_error(ckpt::ckpt_errc::io, "replica: cannot open " + path(index_));
  }
  std::string dir_;
  std::vector<std::pair<std::string, std::uint64_t>> files_;
  bool write_;
  std::string part_;
  std::fstream stream_;
  std::size_t index_ = 0;
  std::uint64_t offset_ = 0;
};

// The header that announces the files of a transfer: JSON [[name, size], ...], zero-padded.
std::string header_of(const std::vector<std::pair<std::string, std::uint64_t>>& files) {
  std::string text = nlohmann::json(files).dump();
  if (text.size() >= header_bytes) throw std::runtime_error("replica: transfer header too long");
  text.resize(header_bytes, '\0');
  return text;
}

}  // namespace

peer_replicas::peer_replicas(const worker_context& ctx, comm::store& store)
    : ctx_(ctx),
      store_(store),
      dir_(ckpt::replica_dir(ckpt::replica_root(), ctx.node, ctx.job_id, ctx.run_dir)) {
  fs::create_directories(dir_);
}

peer_replicas::~peer_replicas() = default;

std::string peer_replicas::step_dir(std::uint64_t step) const { return ckpt::replica_step_dir(dir_, step); }

comm::gloo_process_group& peer_replicas::group() {
  if (group_) return *group_;
  check_cancelled(ctx_.cancelled);
  const auto options = group_options_of(ctx_, comm::backend_kind::gloo, "replicas");
  group_ = std::make_unique<comm::gloo_process_group>(options);
  // Who is where: each rank's node, through the attempt's store, beside the group's own keys.
  key_prefix_ = options.key_prefix;
  const std::string prefix = key_prefix_ + "node-";
  store_.set(prefix + std::to_string(ctx_.rank), ctx_.node);
  std::vector<std::string> nodes;
  for (int r = 0; r < ctx_.world_size; ++r)
    nodes.push_back(store_.get(prefix + std::to_string(r), group_->timeout()));
  buddy_ = ckpt::choose_buddies(nodes);
  for (int r = 0; r < static_cast<int>(buddy_.size()); ++r)
    if (buddy_[r] == ctx_.rank) kept_for_ = r;
  return *group_;
}

std::string peer_replicas::save(std::uint64_t step, const std::vector<ckpt::shard_tensor>& tensors,
                                const ckpt::rank_state& state, const nlohmann::json& metrics,
                                const nlohmann::json& extra) {
  group();
  const bool keep_previous = ctx_.spec.run.checkpoint.replicate_every > 0;
  if (keep_previous) {
    // The newest older step stays until this one is complete everywhere; leftovers go now.
    std::uint64_t newest = 0;
    for (const auto& r : ckpt::scan_replicas(dir_))
      if (r.step < step) newest = std::max(newest, r.step);
    ckpt::drop_replicas(dir_, step, newest);
  } else {
    // The other steps' copies go first (an earlier attempt's too): one step's replicas at most.
    ckpt::drop_replicas(dir_, step);
  }
  const auto report = write_copies(step, tensors, state);
  // Where a test stops a rank with its copies written, none of the step's records yet (1-based attempt).
  test_pause_point("replica-" + ckpt::step_dir_name(step) + "-rank-" + std::to_string(ctx_.rank) +
                       "-attempt-" + std::to_string(ctx_.attempt + 1),
                   ctx_.cancelled);
  write_records(merge_step(step, report, metrics, extra));
  // Every rank's records are written: the step is complete on every node, the older one may go.
  barrier();
  store_.remove(key_prefix_ + ckpt::step_dir_name(step) + "/report-" + std::to_string(ctx_.rank));
  if (keep_previous) ckpt::drop_replicas(dir_, step);
  std::uint64_t shard = 0;
  for (const auto& f : report.files) shard += f.size;
  const std::string kept = "rank " + std::to_string(ctx_.rank) + ": step " + std::to_string(step) +
                           "'s shard (" + std::to_string(shard >> 10) + " KiB) kept in node " + ctx_.node +
                           "'s memory";
  if (buddy_.empty())
    return kept +
           "; no copy on another node (no rotation of the ranks puts every copy on another node: "
           "they are on one node, or on nodes with unequal numbers of ranks)";
  return kept + ", its copy sent to rank " + std::to_string(buddy_[ctx_.rank]) + "; keeping rank " +
         std::to_string(kept_for_) + "'s copy";
}

ckpt::rank_report peer_replicas::write_copies(std::uint64_t step,
                                              const std::vector<ckpt::shard_tensor>& tensors,
                                              const ckpt::rank_state& state) {
  const std::string dir = step_dir(step);
  // An earlier attempt's records of this step would vouch for files about to be rewritten. Each
  // record of a node has one writer: its rank, or (the kept copy) that rank's buddy.
  std::error_code ec;
  fs::remove(dir + "/" + ckpt::replica_record_name(ctx_.rank), ec);
  if (kept_for_ >= 0) fs::remove(dir + "/" + ckpt::replica_record_name(kept_for_), ec);
  auto report = ckpt::write_rank_shard(dir, ctx_.rank, tensors, state);
  if (!buddy_.empty()) transfer(step, ctx_.rank, buddy_[ctx_.rank], kept_for_, kept_for_, 2 * step, false);
  return report;
}

ckpt::manifest peer_replicas::merge_step(std::uint64_t step, const ckpt::rank_report& own,
                                         const nlohmann::json& metrics, const nlohmann::json& extra) {
  const auto& g = group();
  const std::string prefix = key_prefix_ + ckpt::step_dir_name(step) + "/report-";
  store_.set(prefix + std::to_string(ctx_.rank), ckpt::rank_report_to_json(own).dump());
  // Past this barrier every rank's own copy and the copy its buddy keeps are written.
  barrier();
  std::vector<ckpt::rank_report> reports;
  for (int r = 0; r < ctx_.world_size; ++r)
    reports.push_back(r == ctx_.rank ? own
                                     : ckpt::rank_report_from_json(nlohmann::json::parse(
                                           store_.get(prefix + std::to_string(r), g.timeout()))));
  const std::string dir = step_dir(step);
  auto m = ckpt::merge_reports(dir, step, ctx_.world_size, reports, metrics, extra,
                               [&](const ckpt::rank_report& r) {
                                 if (r.rank == ctx_.rank || r.rank == kept_for_)
                                   ckpt::check_rank_files(dir, step, r);  // those here
                               });
  ckpt::write_replica_manifest(dir, m, ctx_.rank);
  return m;
}

void peer_replicas::write_records(const ckpt::manifest& m) {
  for (const int rank : {ctx_.rank, kept_for_}) {
    if (rank < 0) continue;
    ckpt::replica_record r{m.step, rank, m.world_size, {}};
    for (const auto& f : m.files)
      if (f.rank == rank) r.files.push_back(f);
    ckpt::write_replica_record(step_dir(m.step), r);
  }
}

void peer_replicas::barrier() {
  auto& g = group();
  // A stopped rank goes no further (no copy of its counts), and the peers waiting for it here fail
  // at once: its connections reset.
  if (ctx_.cancelled != nullptr && ctx_.cancelled->load()) g.abort("the attempt was cancelled");
  check_cancelled(ctx_.cancelled);
  wait_for(g.barrier(), g, ctx_.cancelled);
}

nlohmann::json peer_replicas::holdings() const {
  auto out = nlohmann::json::array();
  for (const auto& r : ckpt::scan_replicas(dir_)) out.push_back(ckpt::replica_record_to_json(r));
  return out;
}

std::uint64_t peer_replicas::gather(std::uint64_t step, const std::vector<int>& sources) {
  bool moves = false;  // the same answer on every rank: the group is joined only when a copy moves
  for (int r = 0; r < static_cast<int>(sources.size()); ++r) moves = moves || (sources[r] >= 0 && sources[r] != r);
  if (!moves) return 0;
  std::uint64_t received = 0;
  for (int r = 0; r < static_cast<int>(sources.size()); ++r) {
    const int h = sources[r];
    if (h < 0 || h == r || (h != ctx_.rank && r != ctx_.rank)) continue;
    received += h == ctx_.rank ? transfer(step, r, r, -1, -1, 2 * r + 1, true)
                               : transfer(step, -1, -1, r, h, 2 * r + 1, true);
  }
  return received;
}

void peer_replicas::drop() {
  ckpt::drop_replicas(dir_, 0);
  std::error_code ec;
  fs::remove(dir_, ec);  // once empty (the last rank of the node to leave)
}

std::uint64_t peer_replicas::transfer(std::uint64_t step, int shard_out, int to, int shard_in, int from,
                                      std::uint64_t channel, bool whole) {
  auto& g = group();
  const std::string dir = step_dir(step);
  fs::create_directories(dir);
  std::vector<std::pair<std::string, std::uint64_t>> out;
  if (to >= 0)
    for (const auto& name : replica_files(shard_out, whole))
      out.emplace_back(name, fs::file_size(dir + "/" + name));
  const std::string header = header_of(out);
  std::string in_header(header_bytes, '\0');
  g.exchange(header.data(), header.size(), to, in_header.data(), in_header.size(), from, slot_of(channel, 0));
  std::vector<std::pair<std::string, std::uint64_t>> in;
  if (from >= 0) {
    in = nlohmann::json::parse(in_header.c_str()).get<decltype(in)>();
    // Only the files of the replica this rank expects.
    const auto expected = replica_files(shard_in, whole);
    if (in.size() != expected.size())
      throw std::runtime_error("replica: rank " + std::to_string(from) + " sent an unexpected set of files");
    for (std::size_t i = 0; i < in.size(); ++i)
      if (in[i].first != expected[i])
        throw std::runtime_error("replica: rank " + std::to_string(from) + " sent " + in[i].first +
                                 ", expected " + expected[i]);
  }
  file_sequence reader(dir, out, false), writer(dir, in, true, ".part-" + std::to_string(channel));
  const std::uint64_t out_total = reader.total(), in_total = writer.total();
  std::string out_chunk, in_chunk;
  for (std::uint64_t c = 0, done_out = 0, done_in = 0; done_out < out_total || done_in < in_total; ++c) {
    const std::uint64_t n_out = std::min<std::uint64_t>(chunk_bytes, out_total - done_out);
    const std::uint64_t n_in = std::min<std::uint64_t>(chunk_bytes, in_total - done_in);
    out_chunk.resize(n_out), in_chunk.resize(n_in);
    reader.next(out_chunk.data(), n_out);
    g.exchange(out_chunk.data(), n_out, n_out > 0 ? to : -1, in_chunk.data(), n_in, n_in > 0 ? from : -1,
               slot_of(channel, c + 1));
    writer.next(in_chunk.data(), n_in);
    done_out += n_out, done_in += n_in;
  }
  if (from >= 0) writer.finish();
  return in_total;
}

}  // namespace cohort::core::train

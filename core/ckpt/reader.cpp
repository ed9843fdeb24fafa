// Listing, verification, newest-valid selection and rank shard loading.
#include "core/ckpt/reader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/ckpt/base64.hpp"
#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/data/checksum.hpp"
#include "core/model/model_error.hpp"
#include "core/model/safetensors.hpp"

namespace cohort::core::ckpt {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<checkpoint_info> scan_checkpoints(const std::string& run_dir) {
  std::vector<checkpoint_info> out;
  const fs::path root = checkpoints_dir(run_dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    auto step = parse_step_dir_name(it->path().filename().string());
    if (!step) continue;
    checkpoint_info info;
    info.step = *step;
    info.path = it->path().string();
    info.committed = fs::exists(it->path() / committed_name, ec);
    for (fs::directory_iterator f(it->path(), ec), fend; !ec && f != fend; f.increment(ec)) {
      if (f->is_regular_file(ec)) info.bytes += f->file_size(ec);
    }
    ec.clear();
    out.push_back(std::move(info));
  }
  if (ec) throw ckpt_error(ckpt_errc::io, root.string() + ": cannot list: " + ec.message());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::vector<checkpoint_info> list_checkpoints(const std::string& run_dir) {
  auto all = scan_checkpoints(run_dir);
  all.erase(std::remove_if(all.begin(), all.end(), [](const auto& c) { return !c.committed; }), all.end());
  return all;
}

manifest read_manifest(const std::string& ckpt_dir) {
  const std::string committed_path = (fs::path(ckpt_dir) / committed_name).string();
  const std::string manifest_path = (fs::path(ckpt_dir) / manifest_name).string();
  std::string committed_text;
  try {
    committed_text = read_small_file(committed_path);
  } catch (const ckpt_error& e) {
    if (e.code() != ckpt_errc::missing_file) throw;
    throw ckpt_error(ckpt_errc::not_committed,
                     ckpt_dir + ": no COMMITTED marker (the checkpoint was never completed; it is ignored)");
  }
  const json committed = json::parse(committed_text, nullptr, false);
  if (committed.is_discarded() || !committed.is_object() || !committed.contains("manifest_xxh64") ||
      !committed["manifest_xxh64"].is_string()) {
    throw ckpt_error(ckpt_errc::bad_manifest, committed_path + ": unreadable (expected JSON with 'step' and 'manifest_xxh64')");
  }
  std::string text;
  try {
    text = read_small_file(manifest_path);
  } catch (const ckpt_error& e) {
    throw ckpt_error(ckpt_errc::bad_manifest, std::string("manifest unreadable: ") + e.what());
  }
  const std::string digest = data::to_hex64(data::xxh64(text.data(), text.size()));
  if (digest != committed["manifest_xxh64"].get<std::string>()) {
    throw ckpt_error(ckpt_errc::checksum_mismatch,
                     manifest_path + ": checksum mismatch (xxh64 " + digest + ", COMMITTED says " +
                         committed["manifest_xxh64"].get<std::string>() + ")");
  }
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw ckpt_error(ckpt_errc::bad_manifest, manifest_path + ": manifest unreadable: not JSON");
  manifest m = manifest_from_json(j, manifest_path);
  if (committed.contains("step") && committed["step"] != json(m.step)) {
    throw ckpt_error(ckpt_errc::bad_manifest, committed_path + ": step differs from the manifest's " + std::to_string(m.step));
  }
  return m;
}

verify_result verify_checkpoint(const std::string& ckpt_dir) {
  verify_result result;
  std::error_code ec;
  if (!fs::is_directory(ckpt_dir, ec)) {
    result.problems.push_back(ckpt_dir + ": not a checkpoint directory (it does not exist or is not a directory)");
    return result;
  }
  try {
    result.manifest_read = read_manifest(ckpt_dir);
  } catch (const ckpt_error& e) {
    result.problems.push_back(e.what());
    return result;
  }
  const manifest& m = *result.manifest_read;
  for (int rank = 0; rank < m.world_size; ++rank) {
    for (const std::string& name : {rank_shard_name(rank), rank_state_name(rank)}) {
      const bool listed = std::any_of(m.files.begin(), m.files.end(), [&](const file_record& f) { return f.name == name; });
      if (!listed) {
        result.problems.push_back((fs::path(ckpt_dir) / manifest_name).string() + ": does not list " + name +
                                  " of rank " + std::to_string(rank) + " (world size " + std::to_string(m.world_size) + ")");
      }
    }
  }
  std::set<std::string> damaged;  // files with a problem above: their headers are not read
  for (const auto& f : m.files) {
    const std::string path = (fs::path(ckpt_dir) / f.name).string();
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      result.problems.push_back(path + ": missing file (rank " + std::to_string(f.rank) + ")");
      damaged.insert(f.name);
      continue;
    }
    if (static_cast<std::uint64_t>(st.st_size) != f.size) {
      result.problems.push_back(path + ": " + (static_cast<std::uint64_t>(st.st_size) < f.size ? "truncated" : "wrong size") +
                                ": " + std::to_string(st.st_size) + " bytes, manifest says " + std::to_string(f.size));
      damaged.insert(f.name);
      continue;
    }
    try {
      const file_digest d = digest_file(path);
      if (d.xxh64 != f.xxh64) {
        result.problems.push_back(path + ": checksum mismatch (xxh64 " + data::to_hex64(d.xxh64) +
                                  ", manifest says " + data::to_hex64(f.xxh64) + ")");
        damaged.insert(f.name);
      }
    } catch (const ckpt_error& e) {
      result.problems.push_back(e.what());
      damaged.insert(f.name);
    }
  }
  // Each rank's slices in the manifest must be those its shard file declares in its header.
  const std::string manifest_path = (fs::path(ckpt_dir) / manifest_name).string();
  for (int rank = 0; rank < m.world_size; ++rank) {
    std::vector<reported_piece> listed;
    for (const auto& t : m.tensors)
      for (const auto& p : t.pieces)
        if (p.rank == rank) listed.push_back({t.name, t.dtype, t.shape, p});
    const std::string shard_path = (fs::path(ckpt_dir) / rank_shard_name(rank)).string();
    const bool listed_file = std::any_of(m.files.begin(), m.files.end(),
                                         [&](const file_record& f) { return f.name == rank_shard_name(rank); });
    if (!listed_file || damaged.count(rank_shard_name(rank)) != 0) continue;  // reported above
    try {
      if (const auto declared = read_shard_layout(shard_path, rank, m.step)) {
        for (const auto& line : compare_layout(listed, *declared, rank, shard_path))
          result.problems.push_back(manifest_path + ": " + line);
        continue;
      }
      // A file written before layouts were recorded: what its header does say must agree.
      const model::safetensors_reader file(shard_path);
      for (const auto& p : listed) {
        const model::tensor_entry* e = file.find(p.piece.key);
        std::uint64_t stored = 0;
        if (e != nullptr) {
          stored = 1;
          for (auto d : e->shape) stored *= static_cast<std::uint64_t>(d);
        }
        if (e == nullptr || e->dtype != p.dtype || p.piece.key_offset > stored ||
            p.piece.length > stored - p.piece.key_offset) {
          result.problems.push_back(manifest_path + ": rank " + std::to_string(rank) + ", tensor '" + p.tensor +
                                    "': key '" + p.piece.key + "' of " + shard_path +
                                    (e == nullptr ? " is not in the file" : " has another dtype or is too short"));
        }
      }
    } catch (const ckpt_error& e) {
      result.problems.push_back(e.what());
    } catch (const model::model_error& e) {
      result.problems.push_back(e.what());
    }
  }
  return result;
}

latest_result latest_valid(const std::string& run_dir) {
  latest_result out;
  auto all = scan_checkpoints(run_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    verify_result v = verify_checkpoint(it->path);
    if (v.ok()) {
      out.checkpoint = *it;
      out.manifest_read = std::move(v.manifest_read);
      return out;
    }
    std::string reason;
    for (const auto& p : v.problems) reason += (reason.empty() ? "" : "; ") + p;
    out.rejected.push_back({it->path, reason, it->committed});
  }
  return out;
}

rank_shard::rank_shard(std::unique_ptr<model::safetensors_reader> tensors, rank_state state)
    : tensors_(std::move(tensors)), state_(std::move(state)) {}
rank_shard::~rank_shard() = default;
rank_shard::rank_shard(rank_shard&&) noexcept = default;
rank_shard& rank_shard::operator=(rank_shard&&) noexcept = default;

std::vector<std::string> rank_shard::keys() const {
  std::vector<std::string> out;
  for (const auto& e : tensors_->tensors()) out.push_back(e.name);
  return out;
}

const model::tensor_entry& rank_shard::entry(const std::string& key) const {
  const model::tensor_entry* e = tensors_->find(key);
  if (!e) throw ckpt_error(ckpt_errc::bad_input, tensors_->path() + ": no tensor '" + key + "'");
  return *e;
}

std::uint64_t rank_shard::nbytes(const std::string& key) const { return entry(key).nbytes(); }

void rank_shard::read(const std::string& key, void* dst) const {
  try {
    tensors_->read(entry(key), dst);
  } catch (const model::model_error& e) {
    throw ckpt_error(ckpt_errc::io, e.what());
  }
}

rank_state parse_rank_state(const std::string& text, const std::string& where) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ckpt_error(ckpt_errc::bad_manifest, where + ": not a JSON object");
  rank_state s;
  try {
    s.step = j.at("step").get<std::uint64_t>();
    s.scheduler = j.at("scheduler");
    s.rng = base64_decode(j.at("rng").get<std::string>(), where + ": field 'rng'");
    s.sampler = j.at("sampler");
    s.extra = j.at("extra");
  } catch (const json::exception& e) {
    throw ckpt_error(ckpt_errc::bad_manifest,
                     where + ": needs step (integer), scheduler, rng (base64 string), sampler, extra: " + e.what());
  }
  return s;
}

rank_shard load_rank_shard(const std::string& ckpt_dir, const manifest& m, int rank) {
  if (rank < 0 || rank >= m.world_size) {
    throw ckpt_error(ckpt_errc::bad_input, ckpt_dir + ": rank " + std::to_string(rank) + " is outside world size " +
                                               std::to_string(m.world_size) + " of step " + std::to_string(m.step));
  }
  const std::string state_path = (fs::path(ckpt_dir) / rank_state_name(rank)).string();
  rank_state state = parse_rank_state(read_small_file(state_path), state_path);
  const std::string shard_path = (fs::path(ckpt_dir) / rank_shard_name(rank)).string();
  try {
    return rank_shard(std::make_unique<model::safetensors_reader>(shard_path), std::move(state));
  } catch (const model::model_error& e) {
    throw ckpt_error(e.code() == model::model_errc::io ? ckpt_errc::missing_file : ckpt_errc::bad_manifest, e.what());
  }
}

}  // namespace cohort::core::ckpt

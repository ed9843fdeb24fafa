// Rank shard writing and the commit step.
#include "core/ckpt/writer.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <tuple>

#include "core/ckpt/base64.hpp"
#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/data/checksum.hpp"
#include "core/model/model_error.hpp"
#include "core/model/safetensors.hpp"

namespace cohort::core::ckpt {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad_input(const std::string& what) { throw ckpt_error(ckpt_errc::bad_input, what); }

std::uint64_t numel_of(const std::vector<std::int64_t>& shape, const std::string& where) {
  std::uint64_t n = 1;
  for (auto d : shape) {
    if (d < 0) bad_input(where + ": negative dimension in shape");
    n *= static_cast<std::uint64_t>(d);
  }
  return n;
}

json layout_to_json(int rank, std::uint64_t step, const std::vector<reported_piece>& pieces) {
  json slices = json::array();
  for (const auto& p : pieces) {
    slices.push_back({{"key", p.piece.key}, {"tensor", p.tensor}, {"full_shape", p.full_shape},
                      {"offset", p.piece.offset}, {"length", p.piece.length},
                      {"key_offset", p.piece.key_offset}});
  }
  return {{"rank", rank}, {"step", step}, {"slices", slices}};
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// One piece as text: what a disagreement message shows.
std::string piece_text(const reported_piece& p) {
  return "key '" + p.piece.key + "' elements [" + std::to_string(p.piece.offset) + ", +" +
         std::to_string(p.piece.length) + ") at key offset " + std::to_string(p.piece.key_offset) +
         ", " + p.dtype + " " + shape_text(p.full_shape);
}

bool piece_less(const reported_piece& a, const reported_piece& b) {
  return std::tie(a.tensor, a.piece.key, a.piece.offset, a.piece.length, a.piece.key_offset, a.dtype, a.full_shape) <
         std::tie(b.tensor, b.piece.key, b.piece.offset, b.piece.length, b.piece.key_offset, b.dtype, b.full_shape);
}

json state_to_json(const rank_state& s, int rank) {
  return {{"rank", rank}, {"step", s.step}, {"scheduler", s.scheduler},
          {"rng", base64_encode(s.rng)}, {"sampler", s.sampler}, {"extra", s.extra}};
}

// The tensors' bytes in order, each in chunks of at most options.chunk_bytes: borrowed data
// straight from where it lies, a reader's through one buffer.
void write_tensor_data(model::safetensors_writer& file, const std::vector<shard_tensor>& tensors,
                       const write_options& options) {
  const std::size_t chunk = std::max<std::size_t>(options.chunk_bytes, 1);
  std::vector<char> buffer;
  for (const auto& t : tensors) {
    for (std::uint64_t at = 0; at < t.nbytes; at += chunk) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, t.nbytes - at));
      if (t.data != nullptr) {
        file.write(static_cast<const char*>(t.data) + at, n);
      } else {
        buffer.resize(std::max(buffer.size(), n));
        t.read(at, buffer.data(), n);
        file.write(buffer.data(), n);
      }
      if (options.on_bytes) options.on_bytes(n);
    }
  }
}

}  // namespace

std::uint64_t shard_bytes(const std::vector<shard_tensor>& tensors) {
  std::uint64_t total = 0;
  for (const auto& t : tensors) total += t.nbytes;
  return total;
}

json rank_report_to_json(const rank_report& r) {
  json files = json::array();
  for (const auto& f : r.files) {
    files.push_back({{"name", f.name}, {"rank", f.rank}, {"size", f.size}, {"xxh64", data::to_hex64(f.xxh64)}});
  }
  json pieces = json::array();
  for (const auto& p : r.pieces) {
    pieces.push_back({{"tensor", p.tensor}, {"dtype", p.dtype}, {"full_shape", p.full_shape},
                      {"key", p.piece.key}, {"offset", p.piece.offset}, {"length", p.piece.length},
                      {"key_offset", p.piece.key_offset}});
  }
  return {{"rank", r.rank}, {"step", r.step}, {"files", files}, {"pieces", pieces}};
}

rank_report rank_report_from_json(const json& j) {
  try {
    rank_report r;
    r.rank = j.at("rank").get<int>();
    r.step = j.at("step").get<std::uint64_t>();
    for (const json& f : j.at("files")) {
      file_record rec;
      rec.name = f.at("name").get<std::string>();
      rec.rank = f.at("rank").get<int>();
      rec.size = f.at("size").get<std::uint64_t>();
      rec.xxh64 = std::stoull(f.at("xxh64").get<std::string>(), nullptr, 16);
      r.files.push_back(rec);
    }
    for (const json& p : j.at("pieces")) {
      reported_piece rp;
      rp.tensor = p.at("tensor").get<std::string>();
      rp.dtype = p.at("dtype").get<std::string>();
      rp.full_shape = p.at("full_shape").get<std::vector<std::int64_t>>();
      rp.piece.rank = r.rank;
      rp.piece.key = p.at("key").get<std::string>();
      rp.piece.offset = p.at("offset").get<std::uint64_t>();
      rp.piece.length = p.at("length").get<std::uint64_t>();
      rp.piece.key_offset = p.at("key_offset").get<std::uint64_t>();
      r.pieces.push_back(rp);
    }
    return r;
  } catch (const std::exception& e) {
    bad_input(std::string("rank report is malformed (fields rank, step, files, pieces): ") + e.what());
  }
}

rank_report write_rank_shard(const std::string& dir, int rank, const std::vector<shard_tensor>& tensors,
                             const rank_state& state, const write_options& options) {
  if (rank < 0) bad_input("write_rank_shard: rank " + std::to_string(rank) + " is negative");
  rank_report report;
  report.rank = rank;
  report.step = state.step;
  std::vector<model::tensor_header> headers;
  for (const auto& t : tensors) {
    const std::string where = "rank " + std::to_string(rank) + " tensor '" + t.key + "'";
    const std::size_t elem = model::safetensors_dtype_size(t.dtype);
    if (elem == 0) bad_input(where + ": unknown dtype '" + t.dtype + "' (use F32, BF16, F16, I64, U8, ...)");
    const std::uint64_t numel = numel_of(t.shape, where);
    if (numel * elem != t.nbytes) {
      bad_input(where + ": " + std::to_string(t.nbytes) + " bytes given but shape and dtype need " +
                std::to_string(numel * elem));
    }
    if (t.nbytes > 0 && t.data == nullptr && !t.read) bad_input(where + ": data is null and there is no reader");
    headers.push_back({t.key, t.dtype, t.shape, t.nbytes});
    std::vector<logical_slice> slices = t.slices;
    if (slices.empty()) slices.push_back({t.key, t.shape, 0, numel, 0});
    for (const auto& s : slices) {
      const std::uint64_t full = numel_of(s.full_shape, where);
      if (s.key_offset > numel || s.length > numel - s.key_offset) {
        bad_input(where + ": slice of '" + s.tensor + "' reads elements past the stored tensor's " +
                  std::to_string(numel));
      }
      if (s.offset > full || s.length > full - s.offset) {
        bad_input(where + ": slice [" + std::to_string(s.offset) + ", +" + std::to_string(s.length) +
                  ") runs past logical tensor '" + s.tensor + "' of " + std::to_string(full) + " elements");
      }
      report.pieces.push_back({s.tensor, t.dtype, s.full_shape, {rank, t.key, s.offset, s.length, s.key_offset}});
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw ckpt_error(ckpt_errc::io, dir + ": cannot create checkpoint directory: " + ec.message());
  fsync_path(std::filesystem::path(dir).parent_path().string());  // the new step directory's entry

  const std::string shard_path = (std::filesystem::path(dir) / rank_shard_name(rank)).string();
  try {
    model::safetensors_writer file(shard_path, headers,
                                   {{"format", "cohort-ckpt"},
                                    {"rank", std::to_string(rank)},
                                    {layout_metadata_key, layout_to_json(rank, state.step, report.pieces).dump()}});
    write_tensor_data(file, tensors, options);
    file.finish();
  } catch (const model::model_error& e) {
    throw ckpt_error(ckpt_errc::io, e.what());
  }
  fsync_path(shard_path);
  const file_digest shard = digest_file(shard_path);
  report.files.push_back({rank_shard_name(rank), rank, shard.size, shard.xxh64});

  const std::string state_path = (std::filesystem::path(dir) / rank_state_name(rank)).string();
  const std::string state_text = state_to_json(state, rank).dump(1);
  write_file_durable(state_path, state_text);
  report.files.push_back({rank_state_name(rank), rank, state_text.size(),
                          data::xxh64(state_text.data(), state_text.size())});
  return report;
}

std::optional<std::vector<reported_piece>> read_shard_layout(const std::string& shard_path, int rank,
                                                             std::uint64_t step) {
  std::unique_ptr<model::safetensors_reader> file;
  try {
    file = std::make_unique<model::safetensors_reader>(shard_path);
  } catch (const model::model_error& e) {
    throw ckpt_error(e.code() == model::model_errc::io ? ckpt_errc::missing_file : ckpt_errc::bad_manifest, e.what());
  }
  auto it = file->metadata().find(layout_metadata_key);
  if (it == file->metadata().end()) return std::nullopt;
  const auto bad = [&](const std::string& what) {
    throw ckpt_error(ckpt_errc::bad_manifest, shard_path + ": " + what);
  };
  const json j = json::parse(it->second, nullptr, false);
  if (j.is_discarded() || !j.is_object()) bad(std::string("header entry '") + layout_metadata_key + "' is not a JSON object");
  std::vector<reported_piece> out;
  try {
    if (j.at("rank").get<std::int64_t>() != rank)
      bad("header says it is rank " + std::to_string(j.at("rank").get<std::int64_t>()) + "'s file, expected rank " +
          std::to_string(rank));
    if (j.at("step").get<std::uint64_t>() != step)
      bad("header says step " + std::to_string(j.at("step").get<std::uint64_t>()) + ", expected step " +
          std::to_string(step));
    for (const json& s : j.at("slices")) {
      reported_piece p;
      p.tensor = s.at("tensor").get<std::string>();
      p.full_shape = s.at("full_shape").get<std::vector<std::int64_t>>();
      p.piece.rank = rank;
      p.piece.key = s.at("key").get<std::string>();
      p.piece.offset = s.at("offset").get<std::uint64_t>();
      p.piece.length = s.at("length").get<std::uint64_t>();
      p.piece.key_offset = s.at("key_offset").get<std::uint64_t>();
      const std::string where = "tensor '" + p.tensor + "'";
      const model::tensor_entry* e = file->find(p.piece.key);
      if (e == nullptr) bad(where + ": its slice names key '" + p.piece.key + "', which the file does not hold");
      p.dtype = e->dtype;
      std::uint64_t stored = 1;
      for (auto d : e->shape) stored *= static_cast<std::uint64_t>(d);  // validated by the reader
      if (p.piece.key_offset > stored || p.piece.length > stored - p.piece.key_offset)
        bad(where + ": its slice reads past key '" + p.piece.key + "' of " + std::to_string(stored) + " elements");
      std::uint64_t full = 1;
      for (auto d : p.full_shape) {
        if (d < 0 || (d != 0 && full > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d)))
          bad(where + ": full shape " + shape_text(p.full_shape) + " is not a valid shape");
        full *= static_cast<std::uint64_t>(d);
      }
      if (p.piece.offset > full || p.piece.length > full - p.piece.offset)
        bad(where + ": its slice runs past the tensor's " + std::to_string(full) + " elements");
      out.push_back(std::move(p));
    }
  } catch (const json::exception& e) {
    bad(std::string("header entry '") + layout_metadata_key + "' is malformed: " + e.what());
  }
  return out;
}

std::vector<std::string> compare_layout(const std::vector<reported_piece>& reported,
                                        const std::vector<reported_piece>& declared, int rank,
                                        const std::string& shard_path) {
  auto a = reported;
  auto b = declared;
  std::sort(a.begin(), a.end(), piece_less);
  std::sort(b.begin(), b.end(), piece_less);
  std::vector<reported_piece> only_reported;
  std::vector<reported_piece> only_declared;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only_reported), piece_less);
  std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(only_declared), piece_less);
  std::vector<std::string> out;
  const std::string who = "rank " + std::to_string(rank);
  for (const auto& p : only_reported) {
    std::string declared_text;
    for (const auto& d : b)
      if (d.tensor == p.tensor) declared_text += (declared_text.empty() ? "" : "; ") + piece_text(d);
    out.push_back(who + ", tensor '" + p.tensor + "': the report says " + piece_text(p) + ", but " + shard_path +
                  " declares " + (declared_text.empty() ? "no slice of it" : declared_text));
  }
  for (const auto& d : only_declared) {
    if (std::any_of(only_reported.begin(), only_reported.end(), [&](const auto& p) { return p.tensor == d.tensor; }))
      continue;  // named above
    out.push_back(who + ", tensor '" + d.tensor + "': " + shard_path + " declares " + piece_text(d) +
                  ", which the report leaves out");
  }
  return out;
}

void check_rank_files(const std::string& dir, std::uint64_t step, const rank_report& r) {
  for (const auto& f : r.files) {
    struct stat st {};
    const std::string path = (std::filesystem::path(dir) / f.name).string();
    if (::stat(path.c_str(), &st) != 0) {
      throw ckpt_error(ckpt_errc::missing_file, path + ": reported by rank " + std::to_string(r.rank) + " but missing");
    }
    if (static_cast<std::uint64_t>(st.st_size) != f.size) {
      throw ckpt_error(ckpt_errc::truncated, path + ": is " + std::to_string(st.st_size) + " bytes, rank " +
                                                 std::to_string(r.rank) + " reported " + std::to_string(f.size));
    }
  }
  // The report must say what the rank's file says it holds.
  const std::string shard_path = (std::filesystem::path(dir) / rank_shard_name(r.rank)).string();
  const auto declared = read_shard_layout(shard_path, r.rank, step);
  if (!declared) {
    bad_input(dir + ": refusing rank " + std::to_string(r.rank) + "'s report: " + shard_path +
              " has no slice layout in its header ('" + layout_metadata_key + "') to check it against");
  }
  const auto disagreements = compare_layout(r.pieces, *declared, r.rank, shard_path);
  if (!disagreements.empty()) {
    bad_input(dir + ": refusing a report that disagrees with its rank's file: " + disagreements.front() +
              (disagreements.size() > 1 ? " (and " + std::to_string(disagreements.size() - 1) + " more)" : ""));
  }
}

manifest merge_reports(const std::string& where, std::uint64_t step, int world_size,
                       const std::vector<rank_report>& reports, const json& metrics, const json& extra,
                       const std::function<void(const rank_report&)>& check_rank) {
  if (world_size <= 0) bad_input("commit_checkpoint: world_size must be positive, got " + std::to_string(world_size));
  if (!metrics.is_object()) bad_input("commit_checkpoint: metrics must be a JSON object");
  std::vector<const rank_report*> by_rank(static_cast<std::size_t>(world_size), nullptr);
  for (const auto& r : reports) {
    if (r.rank < 0 || r.rank >= world_size) {
      bad_input(where + ": report from rank " + std::to_string(r.rank) + " outside world size " + std::to_string(world_size));
    }
    if (by_rank[static_cast<std::size_t>(r.rank)]) bad_input(where + ": rank " + std::to_string(r.rank) + " reported twice");
    if (r.step != step) {
      bad_input(where + ": rank " + std::to_string(r.rank) + " reported step " + std::to_string(r.step) +
                ", committing step " + std::to_string(step));
    }
    for (const std::string& name : {rank_shard_name(r.rank), rank_state_name(r.rank)}) {
      if (std::none_of(r.files.begin(), r.files.end(), [&](const file_record& f) { return f.name == name; })) {
        bad_input(where + ": rank " + std::to_string(r.rank) + " did not report its file " + name);
      }
    }
    by_rank[static_cast<std::size_t>(r.rank)] = &r;
  }
  for (int rank = 0; rank < world_size; ++rank) {
    if (!by_rank[static_cast<std::size_t>(rank)]) {
      bad_input(where + ": rank " + std::to_string(rank) + " has not reported; cannot commit step " + std::to_string(step));
    }
  }
  manifest m;
  m.step = step;
  m.world_size = world_size;
  m.metrics = metrics;
  m.extra = extra;
  std::map<std::string, logical_tensor> tensors;
  for (const auto& r : reports) {
    check_rank(r);
    for (const auto& f : r.files) m.files.push_back(f);
    for (const auto& p : r.pieces) {
      auto [it, fresh] = tensors.try_emplace(p.tensor);
      logical_tensor& t = it->second;
      if (fresh) {
        t.name = p.tensor;
        t.dtype = p.dtype;
        t.shape = p.full_shape;
      } else if (t.dtype != p.dtype || t.shape != p.full_shape) {
        bad_input(where + ": rank " + std::to_string(r.rank) + " reports tensor '" + p.tensor +
                  "' with a dtype or full shape other ranks do not");
      }
      t.pieces.push_back(p.piece);
    }
  }
  for (auto& [name, t] : tensors) m.tensors.push_back(std::move(t));
  // Round-trip through the validator: coverage, bounds and ranks are checked in one place.
  return manifest_from_json(manifest_to_json(m), where + "/" + manifest_name);
}

std::string committed_marker(std::uint64_t step, const std::string& manifest_text, const attempt_token* token) {
  json committed = {{"step", step}, {"manifest_xxh64", data::to_hex64(data::xxh64(manifest_text.data(), manifest_text.size()))}};
  if (token) {
    committed["job_id"] = token->job_id;
    committed["attempt"] = token->attempt;
  }
  return committed.dump();
}

manifest commit_checkpoint(const std::string& dir, std::uint64_t step, int world_size,
                           const std::vector<rank_report>& reports, const json& metrics, const json& extra,
                           const attempt_token* token) {
  const auto run_dir = std::filesystem::path(dir).parent_path().parent_path().string();
  const auto what = "the commit of " + std::filesystem::path(dir).filename().string();
  // A zombie is refused as one first, whatever its directory holds now (the newer attempt's
  // retention may have removed it as a dead attempt's unfinished save).
  if (token) check_claim(run_dir, *token, what);
  manifest m = merge_reports(dir, step, world_size, reports, metrics, extra,
                             [&](const rank_report& r) { check_rank_files(dir, step, r); });
  const std::string text = manifest_to_json(m).dump(1);
  if (token) check_claim(run_dir, *token, what);
  write_file_durable((std::filesystem::path(dir) / manifest_name).string(), text);
  if (token) check_claim(run_dir, *token, what);
  write_file_durable((std::filesystem::path(dir) / committed_name).string(), committed_marker(step, text, token));
  return m;
}

}  // namespace cohort::core::ckpt

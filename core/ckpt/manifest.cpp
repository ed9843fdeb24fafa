// manifest.json serialisation and validation.
#include "core/ckpt/manifest.hpp"

#include <algorithm>
#include <limits>

#include "core/ckpt/ckpt_error.hpp"
#include "core/data/checksum.hpp"
#include "core/model/safetensors.hpp"

namespace cohort::core::ckpt {
namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw ckpt_error(ckpt_errc::bad_manifest, where + ": " + what);
}

const json& field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) fail(where, std::string("missing field '") + key + "'");
  return *it;
}

std::uint64_t get_u64(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() < 0)) {
    fail(where, std::string("'") + key + "' must be a non-negative integer");
  }
  return v.get<std::uint64_t>();
}

std::string get_string(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_string()) fail(where, std::string("'") + key + "' must be a string");
  return v.get<std::string>();
}

std::uint64_t parse_hex64(const std::string& s, const std::string& where) {
  if (s.size() != 16) fail(where, "'xxh64' must be 16 hex digits, got '" + s + "'");
  std::uint64_t v = 0;
  for (char c : s) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (d < 0) fail(where, "'xxh64' must be 16 lowercase hex digits, got '" + s + "'");
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  return v;
}

}  // namespace

std::uint64_t logical_tensor::numel() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

const logical_tensor* manifest::find(const std::string& name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const logical_tensor& t, const std::string& n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

json manifest_to_json(const manifest& m) {
  json tensors = json::array();
  for (const auto& t : m.tensors) {
    json pieces = json::array();
    for (const auto& p : t.pieces) {
      pieces.push_back({{"rank", p.rank}, {"key", p.key}, {"offset", p.offset},
                        {"length", p.length}, {"key_offset", p.key_offset}});
    }
    tensors.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"pieces", pieces}});
  }
  json files = json::array();
  for (const auto& f : m.files) {
    files.push_back({{"name", f.name}, {"rank", f.rank}, {"size", f.size},
                     {"xxh64", data::to_hex64(f.xxh64)}});
  }
  return {{"format_version", m.format_version}, {"step", m.step}, {"world_size", m.world_size},
          {"tensors", tensors}, {"files", files}, {"metrics", m.metrics}, {"extra", m.extra}};
}

manifest manifest_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) fail(where, "manifest is not a JSON object");
  manifest m;
  const std::uint64_t version = get_u64(j, "format_version", where);
  if (version != static_cast<std::uint64_t>(manifest_format_version)) {
    fail(where, "format_version " + std::to_string(version) + " is not supported (this build reads " +
                    std::to_string(manifest_format_version) + ")");
  }
  m.step = get_u64(j, "step", where);
  const std::uint64_t world = get_u64(j, "world_size", where);
  if (world == 0 || world > 1'000'000) fail(where, "'world_size' must be in [1, 1000000]");
  m.world_size = static_cast<int>(world);

  const json& tensors = field(j, "tensors", where);
  if (!tensors.is_array()) fail(where, "'tensors' must be a list");
  for (const json& tj : tensors) {
    if (!tj.is_object()) fail(where, "every entry of 'tensors' must be an object");
    logical_tensor t;
    t.name = get_string(tj, "name", where);
    const std::string tw = where + ": tensor '" + t.name + "'";
    t.dtype = get_string(tj, "dtype", tw);
    const std::size_t elem = model::safetensors_dtype_size(t.dtype);
    if (elem == 0) fail(tw, "unknown dtype '" + t.dtype + "'");
    const json& shape = field(tj, "shape", tw);
    if (!shape.is_array()) fail(tw, "'shape' must be a list");
    std::uint64_t numel = 1;
    for (const json& d : shape) {
      if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<std::int64_t>() < 0)) {
        fail(tw, "shape entries must be non-negative integers");
      }
      const auto x = d.get<std::uint64_t>();
      if (x != 0 && numel > std::numeric_limits<std::uint64_t>::max() / x / elem) fail(tw, "shape is too large");
      numel *= x;
      t.shape.push_back(static_cast<std::int64_t>(x));
    }
    const json& pieces = field(tj, "pieces", tw);
    if (!pieces.is_array()) fail(tw, "'pieces' must be a list");
    for (const json& pj : pieces) {
      if (!pj.is_object()) fail(tw, "every piece must be an object");
      shard_piece p;
      const std::uint64_t rank = get_u64(pj, "rank", tw);
      if (rank >= world) fail(tw, "piece rank " + std::to_string(rank) + " is not below world_size " + std::to_string(world));
      p.rank = static_cast<int>(rank);
      p.key = get_string(pj, "key", tw);
      p.offset = get_u64(pj, "offset", tw);
      p.length = get_u64(pj, "length", tw);
      p.key_offset = get_u64(pj, "key_offset", tw);
      if (p.offset > numel || p.length > numel - p.offset) {
        fail(tw, "piece of rank " + std::to_string(rank) + " [" + std::to_string(p.offset) + ", +" +
                     std::to_string(p.length) + ") runs past the tensor's " + std::to_string(numel) + " elements");
      }
      t.pieces.push_back(p);
    }
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](const shard_piece& a, const shard_piece& b) { return a.offset < b.offset; });
    std::uint64_t covered = 0;
    for (const auto& p : t.pieces) {
      if (p.offset > covered) break;
      covered = std::max(covered, p.offset + p.length);
    }
    if (covered < numel) {
      fail(tw, "pieces leave elements from " + std::to_string(covered) + " of " + std::to_string(numel) +
                   " uncovered");
    }
    m.tensors.push_back(std::move(t));
  }
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const logical_tensor& a, const logical_tensor& b) { return a.name < b.name; });
  for (std::size_t i = 1; i < m.tensors.size(); ++i) {
    if (m.tensors[i].name == m.tensors[i - 1].name) fail(where, "tensor '" + m.tensors[i].name + "' listed twice");
  }

  const json& files = field(j, "files", where);
  if (!files.is_array()) fail(where, "'files' must be a list");
  for (const json& fj : files) {
    if (!fj.is_object()) fail(where, "every entry of 'files' must be an object");
    file_record f;
    f.name = get_string(fj, "name", where);
    const std::string fw = where + ": file '" + f.name + "'";
    if (f.name.empty() || f.name.find('/') != std::string::npos || f.name == "." || f.name == "..") {
      fail(fw, "file names must be plain names inside the checkpoint directory");
    }
    const std::uint64_t rank = get_u64(fj, "rank", fw);
    if (rank >= world) fail(fw, "rank " + std::to_string(rank) + " is not below world_size " + std::to_string(world));
    f.rank = static_cast<int>(rank);
    f.size = get_u64(fj, "size", fw);
    f.xxh64 = parse_hex64(get_string(fj, "xxh64", fw), fw);
    m.files.push_back(std::move(f));
  }
  std::sort(m.files.begin(), m.files.end(), [](const file_record& a, const file_record& b) { return a.name < b.name; });

  if (auto it = j.find("metrics"); it != j.end()) {
    if (!it->is_object()) fail(where, "'metrics' must be an object");
    m.metrics = *it;
  }
  if (auto it = j.find("extra"); it != j.end()) m.extra = *it;
  return m;
}

}  // namespace cohort::core::ckpt

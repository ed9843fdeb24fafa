// Assembling logical tensor ranges from old rank shards.
#include "core/ckpt/reshard.hpp"

#include <algorithm>
#include <filesystem>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/model/model_error.hpp"
#include "core/model/safetensors.hpp"

namespace cohort::core::ckpt {

flat_range even_partition(std::uint64_t numel, int world_size, int rank) {
  if (world_size <= 0 || rank < 0 || rank >= world_size) {
    throw ckpt_error(ckpt_errc::bad_input, "even_partition: rank " + std::to_string(rank) + " of world size " +
                                               std::to_string(world_size) + " is out of range");
  }
  const auto w = static_cast<std::uint64_t>(world_size);
  const std::uint64_t chunk = (numel + w - 1) / w;
  const std::uint64_t begin = std::min(numel, chunk * static_cast<std::uint64_t>(rank));
  const std::uint64_t end = std::min(numel, begin + chunk);
  return {begin, end - begin};
}

reshard_reader::reshard_reader(std::string ckpt_dir, manifest m) : dir_(std::move(ckpt_dir)), manifest_(std::move(m)) {}
reshard_reader::~reshard_reader() = default;

const model::safetensors_reader& reshard_reader::open_rank(int rank) {
  auto& slot = readers_[rank];
  if (!slot) {
    const std::string path = (std::filesystem::path(dir_) / rank_shard_name(rank)).string();
    try {
      slot = std::make_unique<model::safetensors_reader>(path);
    } catch (const model::model_error& e) {
      throw ckpt_error(e.code() == model::model_errc::io ? ckpt_errc::missing_file : ckpt_errc::bad_manifest, e.what());
    }
  }
  return *slot;
}

void reshard_reader::read(const std::string& name, std::uint64_t offset, std::uint64_t length, void* dst) {
  const logical_tensor* t = manifest_.find(name);
  if (!t) throw ckpt_error(ckpt_errc::bad_input, dir_ + ": checkpoint has no logical tensor '" + name + "'");
  const std::uint64_t numel = t->numel();
  if (offset > numel || length > numel - offset) {
    throw ckpt_error(ckpt_errc::bad_input, dir_ + ": range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                                               ") runs past tensor '" + name + "' of " + std::to_string(numel) + " elements");
  }
  const std::size_t elem = model::safetensors_dtype_size(t->dtype);
  auto* out = static_cast<char*>(dst);
  std::uint64_t pos = offset;
  const std::uint64_t end = offset + length;
  while (pos < end) {
    // Pieces are sorted by offset; take the one covering pos that reaches furthest.
    const shard_piece* best = nullptr;
    for (const auto& p : t->pieces) {
      if (p.offset > pos) break;
      if (p.offset + p.length > pos && (!best || p.offset + p.length > best->offset + best->length)) best = &p;
    }
    if (!best) {
      throw ckpt_error(ckpt_errc::bad_manifest, dir_ + ": no rank holds element " + std::to_string(pos) + " of '" + name + "'");
    }
    const std::uint64_t take = std::min(end, best->offset + best->length) - pos;
    const model::safetensors_reader& reader = open_rank(best->rank);
    const model::tensor_entry* e = reader.find(best->key);
    if (!e) {
      throw ckpt_error(ckpt_errc::bad_manifest, reader.path() + ": has no tensor '" + best->key + "' that the manifest places there");
    }
    if (e->dtype != t->dtype) {
      throw ckpt_error(ckpt_errc::bad_manifest, reader.path() + ": tensor '" + best->key + "' is " + e->dtype +
                                                    ", the manifest says " + t->dtype);
    }
    try {
      reader.read_range(*e, (best->key_offset + (pos - best->offset)) * elem, take * elem, out);
    } catch (const model::model_error& err) {
      throw ckpt_error(ckpt_errc::bad_manifest, err.what());
    }
    out += take * elem;
    pos += take;
  }
}

std::map<std::string, std::string> reshard_reader::read_partition(int world_size, int rank) {
  std::map<std::string, std::string> out;
  for (const auto& t : manifest_.tensors) {
    const flat_range r = even_partition(t.numel(), world_size, rank);
    std::string bytes(r.length * model::safetensors_dtype_size(t.dtype), '\0');
    read(t.name, r.offset, r.length, bytes.data());
    out.emplace(t.name, std::move(bytes));
  }
  return out;
}

}  // namespace cohort::core::ckpt

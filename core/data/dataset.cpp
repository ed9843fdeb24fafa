// A token-shard dataset opened read-only through mmap (see dataset.hpp).
#include "core/data/dataset.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <tuple>
#include <utility>

namespace cohort::core::data {
namespace {

template <typename T>
std::uint64_t copy_ids(const std::uint8_t* file, std::uint64_t begin, std::uint64_t n, std::int64_t vocab,
                       std::int64_t* out) {
  const auto* src = reinterpret_cast<const T*>(file) + begin;
  std::uint64_t bad = n;  // the first out-of-vocabulary position, n when none
  for (std::uint64_t t = 0; t < n; ++t) {
    out[t] = src[t];
    if (out[t] >= vocab && bad == n) bad = t;
  }
  return bad;
}

mapped_file open_checked(const std::filesystem::path& path, std::uint64_t expected_bytes) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw data_error(path.string() + ": missing or unreadable (" + ec.message() + "); rebuild the dataset");
  if (size != expected_bytes)
    throw data_error(path.string() + ": " + std::to_string(size) + " bytes on disk but the manifest says " +
                     std::to_string(expected_bytes) + (size < expected_bytes ? " (truncated)" : " (wrong size)") +
                     "; rebuild the dataset or restore the shard");
  return mapped_file(path.string());
}

// One stream's .tokens and .index files, checked against the manifest: sizes, then two cheap reads
// that catch an index that does not belong to its tokens file.
std::pair<mapped_file, mapped_file> map_stream(const std::filesystem::path& tokens_path, const file_info& tokens_file,
                                               const std::filesystem::path& index_path, const file_info& index_file,
                                               std::int64_t samples, std::int64_t tokens, int token_bytes) {
  if (tokens_file.bytes != static_cast<std::uint64_t>(tokens) * token_bytes)
    throw data_error(tokens_path.string() + ": manifest size disagrees with its token count; rebuild the dataset");
  if (index_file.bytes != static_cast<std::uint64_t>(samples + 1) * 8)
    throw data_error(index_path.string() + ": manifest size disagrees with its sample count; rebuild the dataset");
  auto t = open_checked(tokens_path, tokens_file.bytes);
  auto x = open_checked(index_path, index_file.bytes);
  const auto* offsets = reinterpret_cast<const std::uint64_t*>(x.data());
  if (offsets[0] != 0 || offsets[samples] != static_cast<std::uint64_t>(tokens))
    throw data_error(index_path.string() + ": offsets do not span the shard's " + std::to_string(tokens) +
                     " tokens (corrupt index); run `cohort-data verify` and rebuild");
  return {std::move(t), std::move(x)};
}

}  // namespace

dataset::shard dataset::map_shard(const std::string& dir, const shard_info& info) const {
  const std::filesystem::path root(dir);
  shard s;
  std::tie(s.tokens, s.index) = map_stream(root / (info.name + ".tokens"), info.tokens_file,
                                           root / (info.name + ".index"), info.index_file, info.samples,
                                           info.tokens, manifest_.token_bytes);
  s.offsets = reinterpret_cast<const std::uint64_t*>(s.index.data());
  if (manifest_.has_loss_mask) s.mask = open_checked(root / (info.name + ".mask"), info.mask_file->bytes);
  if (is_seq2seq()) {
    std::tie(s.target_tokens, s.target_index) =
        map_stream(root / (info.name + ".target_tokens"), *info.target_tokens_file,
                   root / (info.name + ".target_index"), *info.target_index_file, info.samples, info.target_tokens,
                   manifest_.token_bytes);
    s.target_offsets = reinterpret_cast<const std::uint64_t*>(s.target_index.data());
  }
  return s;
}

std::uint64_t dataset::shard_bytes(const shard_info& info) const {
  std::uint64_t bytes = 0;
  for (const auto& f : shard_files(info)) bytes += f.second->bytes;
  return bytes;
}

dataset::dataset(const std::string& dir) : dir_(dir), manifest_(read_manifest(dir)) {
  shards_.reserve(manifest_.shards.size());
  first_sample_.push_back(0);
  for (const auto& info : manifest_.shards) {
    shards_.push_back(map_shard(dir, info));
    first_sample_.push_back(first_sample_.back() + info.samples);
  }
}

dataset::dataset(std::shared_ptr<shard_source> source, std::uint64_t cache_bytes)
    : dir_(source->where()), manifest_(source->read_manifest()), source_(std::move(source)), cache_bytes_(cache_bytes) {
  shards_.resize(manifest_.shards.size());
  first_sample_.push_back(0);
  std::uint64_t largest = 0;
  for (const auto& info : manifest_.shards) {
    if (manifest_.has_loss_mask && !info.mask_file)
      throw data_error(dir_ + ": the manifest lists no mask file for " + info.name);
    largest = std::max(largest, shard_bytes(info));
    first_sample_.push_back(first_sample_.back() + info.samples);
  }
  if (largest > cache_bytes_)
    throw data_error(dir_ + ": the local cache of " + std::to_string(cache_bytes_) +
                     " bytes (data.cache_bytes) cannot hold the largest shard's files, " + std::to_string(largest) +
                     " bytes; raise data.cache_bytes");
}

std::uint64_t dataset::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return resident_bytes_;
}

std::uint64_t dataset::shard_fetches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fetches_;
}

std::unique_lock<std::mutex> dataset::lock_if_streamed() const {
  return source_ ? std::unique_lock<std::mutex>(mutex_) : std::unique_lock<std::mutex>();
}

void dataset::make_resident(std::size_t k) const {
  if (shards_[k].offsets != nullptr) {
    resident_.remove(k);
    resident_.push_front(k);
    return;
  }
  const shard_info& info = manifest_.shards[k];
  const std::uint64_t bytes = shard_bytes(info);
  while (!resident_.empty() && resident_bytes_ + bytes > cache_bytes_) {  // least recently read first
    const std::size_t old = resident_.back();
    resident_.pop_back();
    shards_[old] = shard{};
    source_->drop(manifest_.shards[old]);
    resident_bytes_ -= shard_bytes(manifest_.shards[old]);
  }
  shards_[k] = map_shard(source_->fetch(info, manifest_.has_loss_mask), info);
  ++fetches_;
  resident_.push_front(k);
  resident_bytes_ += bytes;
}

dataset::location dataset::locate(std::int64_t i, bool target) const {
  if (i < 0 || i >= manifest_.samples)
    throw data_error(dir_ + ": sample " + std::to_string(i) + " out of range [0, " +
                     std::to_string(manifest_.samples) + ")");
  const auto it = std::upper_bound(first_sample_.begin(), first_sample_.end(), i);
  const auto k = static_cast<std::size_t>(it - first_sample_.begin() - 1);
  const auto local = static_cast<std::size_t>(i - first_sample_[k]);
  if (source_) make_resident(k);
  const shard& s = shards_[k];
  const std::uint64_t* offsets = target ? s.target_offsets : s.offsets;
  const std::uint64_t begin = offsets[local];
  const std::uint64_t end = offsets[local + 1];
  const auto& info = manifest_.shards[k];
  if (end < begin || end > static_cast<std::uint64_t>(target ? info.target_tokens : info.tokens))
    throw data_error((std::filesystem::path(dir_) / (info.name + (target ? ".target_index" : ".index"))).string() +
                     ": bad offsets for sample " + std::to_string(i) + " (corrupt index); rebuild the dataset");
  return {&s, target ? &s.target_tokens : &s.tokens, begin, end - begin};
}

void dataset::copy_ids_checked(const location& loc, std::int64_t i, std::int64_t* tokens, std::uint64_t n) const {
  const std::uint64_t bad =
      manifest_.token_bytes == 2
          ? copy_ids<std::uint16_t>(loc.tokens->data(), loc.begin, n, manifest_.vocab_size, tokens)
          : copy_ids<std::uint32_t>(loc.tokens->data(), loc.begin, n, manifest_.vocab_size, tokens);
  if (bad != n) {
    const std::uint64_t token = loc.begin + bad;
    throw data_error(loc.tokens->path() + ": token id " + std::to_string(tokens[bad]) + " at token offset " +
                     std::to_string(token) + " (byte offset " + std::to_string(token * manifest_.token_bytes) +
                     ", sample " + std::to_string(i) + ") is not below the data set's vocab_size " +
                     std::to_string(manifest_.vocab_size) + " (corrupt shard); run `cohort-data verify " + dir_ +
                     "` and rebuild the data set");
  }
}

std::int64_t dataset::sample_length(std::int64_t i) const {
  const auto lock = lock_if_streamed();
  return static_cast<std::int64_t>(locate(i, false).length);
}

std::int64_t dataset::read_sample(std::int64_t i, std::int64_t* tokens, std::uint8_t* loss_mask,
                                  std::int64_t capacity) const {
  const auto lock = lock_if_streamed();  // streamed: no shard is dropped while it is read
  const location loc = locate(i, false);
  const auto n = static_cast<std::uint64_t>(std::min<std::int64_t>(capacity, static_cast<std::int64_t>(loc.length)));
  copy_ids_checked(loc, i, tokens, n);
  if (loss_mask != nullptr) {
    if (manifest_.has_loss_mask) {
      const std::uint8_t* bits = loc.s->mask.data();
      for (std::uint64_t t = 0; t < n; ++t) {
        const std::uint64_t bit = loc.begin + t;
        loss_mask[t] = (bits[bit >> 3] >> (bit & 7)) & 1;
      }
    } else {
      std::memset(loss_mask, 1, n);
    }
  }
  return static_cast<std::int64_t>(n);
}

std::vector<std::int64_t> dataset::sample_tokens(std::int64_t i) const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(sample_length(i)));
  read_sample(i, out.data(), nullptr, static_cast<std::int64_t>(out.size()));
  return out;
}

std::vector<std::uint8_t> dataset::sample_loss_mask(std::int64_t i) const {
  const auto n = static_cast<std::size_t>(sample_length(i));
  std::vector<std::int64_t> tokens(n);
  std::vector<std::uint8_t> mask(n);
  read_sample(i, tokens.data(), mask.data(), static_cast<std::int64_t>(n));
  return mask;
}

void dataset::require_seq2seq() const {
  if (!is_seq2seq())
    throw data_error(dir_ + ": a \"" + manifest_.kind + "\" data set has no target (decoder) ids; seq2seq models read "
                     "data sets built with `cohort-data build --template-source S --template-target T`");
}

std::int64_t dataset::target_len() const {
  require_seq2seq();
  return manifest_.seq2seq->target_len;
}

std::int64_t dataset::target_length(std::int64_t i) const {
  require_seq2seq();
  const auto lock = lock_if_streamed();
  return static_cast<std::int64_t>(locate(i, true).length);
}

std::int64_t dataset::read_target(std::int64_t i, std::int64_t* tokens, std::int64_t capacity) const {
  require_seq2seq();
  const auto lock = lock_if_streamed();
  const location loc = locate(i, true);
  const auto n = static_cast<std::uint64_t>(std::min<std::int64_t>(capacity, static_cast<std::int64_t>(loc.length)));
  copy_ids_checked(loc, i, tokens, n);
  return static_cast<std::int64_t>(n);
}

std::vector<std::int64_t> dataset::target_tokens(std::int64_t i) const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(target_length(i)));
  read_target(i, out.data(), static_cast<std::int64_t>(out.size()));
  return out;
}

}  // namespace cohort::core::data

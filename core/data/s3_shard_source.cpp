// Shards of a data set in S3, fetched into a local cache and checked against the manifest.
#include "core/data/s3_shard_source.hpp"

#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include "core/data/checksum.hpp"

namespace cohort::core::data {
namespace {

namespace fs = std::filesystem;

// XXH64 (hex) of a file, or "" when it cannot be read.
std::string file_xxh64(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  xxh64_stream h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  return h.hex_digest();
}

bool matches(const std::string& path, const file_info& info) {
  std::error_code ec;
  return fs::file_size(path, ec) == info.bytes && !ec && file_xxh64(path) == info.xxh64;
}

}  // namespace

s3_shard_source::s3_shard_source(std::shared_ptr<const storage::s3_client> client, storage::s3_url url,
                                 std::string cache_dir)
    : client_(std::move(client)), url_(std::move(url)), cache_dir_(std::move(cache_dir)) {
  std::error_code ec;
  fs::create_directories(cache_dir_, ec);
  if (ec) throw data_error(cache_dir_ + ": cannot create the data cache directory: " + ec.message());
}

manifest s3_shard_source::read_manifest() {
  const std::string key = url_.key(manifest_name);
  try {
    return manifest_from_json(client_->get_object(url_.bucket, key), "s3://" + url_.bucket + "/" + key);
  } catch (const storage::s3_error& e) {
    throw data_error(std::string(e.what()) + " (is " + url_.text() + " a data set written by `cohort-data build`?)");
  }
}

std::string s3_shard_source::fetch(const shard_info& shard, bool has_loss_mask) {
  if (has_loss_mask && !shard.mask_file)
    throw data_error(url_.text() + ": the manifest lists no mask file for " + shard.name);
  for (const auto& [name, info] : shard_files(shard)) {
    const std::string local = (fs::path(cache_dir_) / name).string();
    if (matches(local, *info)) continue;  // cached by an earlier fetch or run
    const std::string key = url_.key(name);
    std::string why;
    try {
      why = client_->get_to_file_checked(url_.bucket, key, local, [&](const std::string& part) -> std::string {
        if (matches(part, *info)) return "";
        return "s3://" + url_.bucket + "/" + key + ": size or XXH64 differs from the data set's manifest " +
               "(corrupt or replaced shard); rebuild or re-upload the data set";
      });
    } catch (const storage::s3_error& e) {
      throw data_error(e.what());
    }
    if (!why.empty()) throw data_error(why);
  }
  return cache_dir_;
}

void s3_shard_source::drop(const shard_info& shard) {
  std::error_code ec;
  for (const auto& f : shard_files(shard)) fs::remove(fs::path(cache_dir_) / f.first, ec);
}

std::shared_ptr<const dataset> open_dataset(const std::string& location, const std::string& endpoint,
                                            const std::string& cache_dir, std::uint64_t cache_bytes) {
  if (!storage::is_s3_url(location)) return std::make_shared<const dataset>(location);
  auto client = std::make_shared<const storage::s3_client>(storage::s3_config_from_environment(endpoint));
  auto source = std::make_shared<s3_shard_source>(std::move(client), storage::parse_s3_url(location, "data.train"), cache_dir);
  return std::make_shared<const dataset>(std::move(source), cache_bytes);
}

}  // namespace cohort::core::data

// Model directories on local disk or in S3; S3 objects read by ranged GETs.
#include "core/model/hf_files.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/model/model_config.hpp"
#include "core/model/model_error.hpp"

namespace cohort::core::model {
namespace {

namespace fs = std::filesystem;

// An S3 object read by ranged GETs of at most `piece` bytes, up to `parallel` of them at once for
// one read.
class s3_file final : public weight_file {
 public:
  static constexpr std::uint64_t parallel = 8;

  s3_file(std::shared_ptr<const storage::s3_client> client, std::string bucket,
          storage::s3_object_info object, std::uint64_t piece)
      : client_(std::move(client)),
        bucket_(std::move(bucket)),
        object_(std::move(object)),
        name_("s3://" + bucket_ + "/" + object_.key),
        piece_(piece) {}

  const std::string& name() const override { return name_; }
  std::uint64_t size() const override { return object_.size; }
  void read(std::uint64_t offset, std::uint64_t length, void* dst) const override {
    check_weight_range(*this, offset, length);
    const std::uint64_t pieces = (length + piece_ - 1) / piece_;
    auto* out = static_cast<char*>(dst);
    const auto fetch = [&](std::uint64_t i) {
      const std::uint64_t first = i * piece_, n = std::min(piece_, length - first);
      std::string bytes;
      try {
        bytes = client_->get_range(bucket_, object_.key, offset + first, n, object_.etag);
      } catch (const storage::s3_error& e) {
        throw model_error(model_errc::io, e.what());
      }
      std::memcpy(out + first, bytes.data(), n);
    };
    if (pieces <= 1) {
      if (pieces == 1) fetch(0);
      return;
    }
    std::atomic<std::uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;
    std::mutex error_mutex;
    const auto work = [&] {
      for (std::uint64_t i; !failed && (i = next++) < pieces;) {
        try {
          fetch(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) error = std::current_exception();
          failed = true;
        }
      }
    };
    std::vector<std::thread> helpers;
    for (std::uint64_t t = 1; t < std::min(pieces, parallel); ++t) helpers.emplace_back(work);
    work();
    for (auto& t : helpers) t.join();
    if (error) std::rethrow_exception(error);
  }

 private:
  std::shared_ptr<const storage::s3_client> client_;
  std::string bucket_;
  storage::s3_object_info object_;
  std::string name_;
  std::uint64_t piece_;
};

// Weights in formats other than safetensors, which cohort does not read: never copied.
bool other_weights(const std::string& extension) {
  for (const char* ext : {".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt", ".gguf", ".onnx"})
    if (extension == ext) return true;
  return false;
}

// Copies `object` to `path` (s3_client::get_to_file_checked), in place once its length is the
// listed size.
void copy_object(const storage::s3_client& client, const std::string& bucket,
                 const storage::s3_object_info& object, const std::string& path) {
  std::string why;
  try {
    why = client.get_to_file_checked(bucket, object.key, path, [&](const std::string& part) -> std::string {
      std::error_code ec;
      const auto got = fs::file_size(part, ec);
      if (!ec && got == object.size) return "";
      return "s3://" + bucket + "/" + object.key + ": fetched " + std::to_string(got) + " bytes, the listing says " +
             std::to_string(object.size) + " (replaced or cut while fetched?)";
    });
  } catch (const storage::s3_error& e) {
    throw model_error(model_errc::io, e.what());
  }
  if (!why.empty()) throw model_error(model_errc::io, why);
}

}  // namespace

hf_files local_hf_files(const std::string& dir) {
  hf_files f;
  f.dir = dir;
  f.where = dir;
  f.open = [dir](const std::string& name) -> std::unique_ptr<weight_file> {
    const std::string path = (fs::path(dir) / name).string();
    std::error_code ec;
    if (!fs::exists(path, ec)) return nullptr;
    return open_local_weight_file(path);
  };
  return f;
}

hf_files fetch_hf_files(std::shared_ptr<const storage::s3_client> client, const storage::s3_url& url,
                        const std::string& cache_dir, std::uint64_t range_bytes) {
  if (range_bytes == 0)
    throw model_error(model_errc::bad_input, "fetch_hf_files: range_bytes must be positive");
  const std::string prefix = url.prefix.empty() ? "" : url.prefix + "/";
  std::vector<storage::s3_object_info> listed;
  try {
    listed = client->list_objects(url.bucket, prefix);
  } catch (const storage::s3_error& e) {
    throw model_error(model_errc::io, url.text() + ": cannot list the model's files: " + e.what());
  }
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  if (ec)
    throw model_error(model_errc::io,
                      cache_dir + ": cannot create the model cache directory: " + ec.message());
  auto weights = std::make_shared<std::map<std::string, storage::s3_object_info>>();
  std::set<std::string> copied;
  for (const auto& object : listed) {
    const std::string name = object.key.substr(prefix.size());
    const std::string extension = fs::path(name).extension().string();
    if (name.empty() || name.find('/') != std::string::npos || other_weights(extension)) continue;
    if (extension == ".safetensors") {
      weights->emplace(name, object);
      continue;
    }
    copy_object(*client, url.bucket, object, (fs::path(cache_dir) / name).string());
    copied.insert(name);
  }
  // A file an earlier listing had (an index since removed) would be read as the model's: gone.
  // Another process's copy in flight (.part-) is left alone.
  for (const auto& entry : fs::directory_iterator(cache_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && !copied.count(name) && name.find(".part-") == std::string::npos)
      fs::remove(entry.path(), ec);
  }
  const bool has_config = copied.count("config.json") > 0;
  if (!has_config)
    throw model_error(model_errc::bad_weights, url.text() + ": no config.json under this prefix (found " +
                                                   std::to_string(listed.size()) +
                                                   " objects); model.hf_dir must hold a Hugging Face model");
  hf_files f;
  f.dir = cache_dir;
  f.where = url.text();
  f.open = [client, bucket = url.bucket, weights,
            range_bytes](const std::string& name) -> std::unique_ptr<weight_file> {
    const auto it = weights->find(name);
    if (it == weights->end()) return nullptr;
    return std::make_unique<s3_file>(client, bucket, it->second, range_bytes);
  };
  return f;
}

hf_files open_hf_files(const std::string& location, const std::string& s3_endpoint,
                       const std::string& cache_dir) {
  if (!storage::is_s3_url(location)) return local_hf_files(location);
  auto client = std::make_shared<const storage::s3_client>(storage::s3_config_from_environment(s3_endpoint));
  return fetch_hf_files(std::move(client), storage::parse_s3_url(location, "model.hf_dir"), cache_dir);
}

nlohmann::json read_hf_config_json(const std::string& location, const std::string& s3_endpoint,
                                   std::string* file) {
  if (!storage::is_s3_url(location)) return read_config_json(location, file);
  const auto url = storage::parse_s3_url(location, "model.hf_dir");
  const std::string where = "s3://" + url.bucket + "/" + url.key("config.json");
  if (file) *file = where;
  std::string text;
  try {
    text = storage::s3_client(storage::s3_config_from_environment(s3_endpoint))
               .get_object(url.bucket, url.key("config.json"));
  } catch (const storage::s3_error& e) {
    throw model_error(model_errc::bad_config,
                      std::string(e.what()) + " (model.hf_dir must hold a Hugging Face model)");
  }
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    throw model_error(model_errc::bad_config, where + ": not a JSON object");
  return json;
}

}  // namespace cohort::core::model

// Checkpoint -> Hugging Face directory, one tensor at a time through one staging buffer.
#include "core/ckpt/hf_export.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/ckpt/bf16.hpp"
#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/reader.hpp"
#include "core/ckpt/reshard.hpp"
#include "core/model/hf_layout.hpp"
#include "core/model/model_config.hpp"
#include "core/model/model_error.hpp"
#include "core/model/safetensors.hpp"

namespace cohort::core::ckpt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// One weight of the export: its HF name, where it lives in the checkpoint, its bytes out.
struct export_tensor {
  std::string name;
  const logical_tensor* source = nullptr;
  std::uint64_t out_bytes = 0;
};

[[noreturn]] void bad_manifest(const std::string& what) { throw ckpt_error(ckpt_errc::bad_manifest, what); }

manifest verified_manifest(const std::string& ckpt_dir, bool verify) {
  std::error_code ec;
  if (!fs::is_directory(ckpt_dir, ec)) {
    throw ckpt_error(ckpt_errc::missing_file,
                     ckpt_dir + ": not a checkpoint directory (it does not exist or is not a directory)");
  }
  manifest m = read_manifest(ckpt_dir);  // COMMITTED and manifest errors keep their own code
  if (!verify) return m;
  const verify_result v = verify_checkpoint(ckpt_dir);
  if (v.ok()) return m;
  std::string problems;
  for (const auto& p : v.problems) problems += (problems.empty() ? "" : "; ") + p;
  throw ckpt_error(ckpt_errc::checksum_mismatch,
                   ckpt_dir + ": refusing to export a checkpoint that fails verification (" +
                       std::to_string(v.problems.size()) + " problem" + (v.problems.size() == 1 ? "" : "s") +
                       "): " + problems);
}

model::model_config model_config_of(const manifest& m, const std::string& where) {
  if (!m.extra.is_object() || !m.extra.contains("model_config")) {
    bad_manifest(where + ": extra has no 'model_config' (the model's config.json): the checkpoint was not "
                         "written by a causal_lm job, so there is no model to export");
  }
  try {
    return model::parse_config(m.extra.at("model_config"), where + ": extra.model_config");
  } catch (const model::model_error& e) {
    bad_manifest(e.what());
  }
}

std::vector<std::string> tokenizer_files_of(const manifest& m, const std::string& where) {
  std::vector<std::string> out;
  if (!m.extra.is_object() || !m.extra.contains("tokenizer_files")) return out;
  const json& list = m.extra.at("tokenizer_files");
  if (!list.is_array()) bad_manifest(where + ": extra.tokenizer_files must be a list of file paths");
  for (const json& f : list) {
    if (!f.is_string() || f.get<std::string>().empty()) {
      bad_manifest(where + ": every entry of extra.tokenizer_files must be a file path, got " + f.dump());
    }
    out.push_back(f.get<std::string>());
  }
  return out;
}

// The weights save_hf_model writes for this config, in name order: every param/ tensor, less a
// tied lm_head.
std::vector<export_tensor> plan_weights(const manifest& m, const model::model_config& cfg, std::size_t out_elem,
                                        const std::string& where) {
  const std::string prefix = param_tensor_prefix;
  std::vector<export_tensor> out;
  for (const auto& t : m.tensors) {
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = t.name.substr(prefix.size());
    if (name.empty()) bad_manifest(where + ": tensor '" + t.name + "' names no weight");
    if (cfg.tie_word_embeddings && name == "lm_head.weight") continue;
    if (t.dtype != "F32") {
      bad_manifest(where + ": tensor '" + t.name + "' is " + t.dtype +
                   "; export reads the fp32 master weights, which must be F32");
    }
    out.push_back({name, &t, t.numel() * out_elem});
  }
  if (out.empty()) {
    bad_manifest(where + ": no '" + prefix + "<name>' tensors: the checkpoint holds no model weights to export");
  }
  std::sort(out.begin(), out.end(), [](const export_tensor& a, const export_tensor& b) { return a.name < b.name; });
  return out;
}

// Rewrites the first n fp32 values of `bytes` as bf16 values at its start.
void to_bf16_in_place(char* bytes, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    float f = 0;
    std::memcpy(&f, bytes + 4 * i, 4);
    const std::uint16_t h = bf16_from_f32(f);
    std::memcpy(bytes + 2 * i, &h, 2);
  }
}

void write_weights(const std::string& ckpt_dir, const manifest& m, const std::vector<export_tensor>& weights,
                   bool bf16, std::uint64_t max_shard_bytes, const std::string& out_dir, hf_export_stats& stats) {
  std::uint64_t largest = 0;
  std::vector<std::uint64_t> sizes;
  for (const auto& w : weights) {
    largest = std::max(largest, w.source->numel() * 4);
    sizes.push_back(w.out_bytes);
    stats.weight_bytes += w.out_bytes;
  }
  std::vector<char> buffer(largest);  // (numel) fp32, converted in place for bf16
  stats.largest_buffer_bytes = buffer.size();
  reshard_reader reader(ckpt_dir, m);
  const auto shards = model::plan_hf_shards(sizes, max_shard_bytes);
  std::map<std::string, std::string> weight_map;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const std::string file = model::hf_weights_file_name(s, shards.size());
    std::vector<model::tensor_header> headers;
    for (std::size_t i : shards[s]) {
      headers.push_back({weights[i].name, bf16 ? "BF16" : "F32", weights[i].source->shape, weights[i].out_bytes});
      weight_map[weights[i].name] = file;
    }
    try {
      model::safetensors_writer writer((fs::path(out_dir) / file).string(), headers);
      for (std::size_t i : shards[s]) {
        const logical_tensor& t = *weights[i].source;
        reader.read(t.name, 0, t.numel(), buffer.data());
        if (bf16) to_bf16_in_place(buffer.data(), t.numel());
        writer.write(buffer.data(), weights[i].out_bytes);
        ++stats.tensors;
      }
      writer.finish();
    } catch (const model::model_error& e) {
      throw ckpt_error(ckpt_errc::io, e.what());
    }
    stats.files.push_back(file);
  }
  if (shards.size() > 1) {
    write_file_durable((fs::path(out_dir) / model::hf_index_name).string(),
                       model::hf_weights_index(stats.weight_bytes, weight_map).dump(2) + "\n");
    stats.files.push_back(model::hf_index_name);
  }
}

void copy_tokenizer_files(const std::vector<std::string>& files, const std::string& out_dir, hf_export_stats& stats) {
  for (const auto& f : files) {
    const fs::path from(f);
    const fs::path to = fs::path(out_dir) / from.filename();
    std::error_code ec;
    if (!fs::is_regular_file(from, ec)) {
      stats.warnings.push_back(f + ": listed in the checkpoint's tokenizer_files but missing; not copied");
      continue;
    }
    if (!(fs::exists(to, ec) && fs::equivalent(from, to, ec))) {
      fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
      if (ec) throw ckpt_error(ckpt_errc::io, f + ": cannot copy to " + to.string() + ": " + ec.message());
    }
    stats.files.push_back(to.filename().string());
  }
}

}  // namespace

hf_export_stats export_hf(const std::string& ckpt_dir, const std::string& out_dir, const hf_export_options& options) {
  if (options.dtype != "fp32" && options.dtype != "bf16") {
    throw ckpt_error(ckpt_errc::bad_input, "export dtype '" + options.dtype + "' is not supported (use fp32 or bf16)");
  }
  if (options.max_shard_bytes == 0) throw ckpt_error(ckpt_errc::bad_input, "export max_shard_bytes must be positive");
  const bool bf16 = options.dtype == "bf16";
  const manifest m = verified_manifest(ckpt_dir, options.verify);
  const std::string where = (fs::path(ckpt_dir) / manifest_name).string();
  model::model_config cfg = model_config_of(m, where);
  const std::vector<std::string> tokenizer_files = tokenizer_files_of(m, where);
  const std::vector<export_tensor> weights = plan_weights(m, cfg, bf16 ? 2 : 4, where);

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw ckpt_error(ckpt_errc::io, out_dir + ": cannot create the export directory: " + ec.message());
  try {
    model::remove_hf_weights(out_dir);
  } catch (const model::model_error& e) {
    throw ckpt_error(ckpt_errc::io, e.what());
  }
  hf_export_stats stats;
  cfg.dtype = bf16 ? "bfloat16" : "float32";
  write_file_durable((fs::path(out_dir) / "config.json").string(), model::to_hf_json(cfg).dump(2) + "\n");
  stats.files.push_back("config.json");
  write_weights(ckpt_dir, m, weights, bf16, options.max_shard_bytes, out_dir, stats);
  copy_tokenizer_files(tokenizer_files, out_dir, stats);
  fsync_path(out_dir);
  return stats;
}

}  // namespace cohort::core::ckpt

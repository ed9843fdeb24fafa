// Checkpoint -> Hugging Face directory, one tensor at a time through one staging buffer.
#include "core/ckpt/hf_export.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/ckpt/bf16.hpp"
#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/reader.hpp"
#include "core/ckpt/reshard.hpp"
#include "core/ckpt/tokenizer_added_tokens.hpp"
#include "core/model/hf_layout.hpp"
#include "core/model/lora_config.hpp"
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
std::vector<export_tensor> plan_weights(const manifest& m, bool tied_head, std::size_t out_elem,
                                        const std::string& where) {
  const std::string prefix = param_tensor_prefix;
  std::vector<export_tensor> out;
  for (const auto& t : m.tensors) {
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = t.name.substr(prefix.size());
    if (name.empty()) bad_manifest(where + ": tensor '" + t.name + "' names no weight");
    if (tied_head && name == "lm_head.weight") continue;
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
                   bool bf16, const hf_export_options& options, const std::string& out_dir, hf_export_stats& stats) {
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
  const auto shards = model::plan_hf_shards(sizes, options.max_shard_bytes);
  std::uint64_t written = 0;
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
        written += weights[i].out_bytes;
        if (options.progress) options.progress(written, stats.weight_bytes);
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

// LoRA: the adapters of a checkpoint, by module.
struct adapter {
  std::vector<float> a, b;  // (r, in), (out, r)
  std::vector<std::int64_t> a_shape, b_shape;
  bool merged = false;
};

model::lora_config lora_of(const manifest& m, const std::string& where) {
  if (!m.extra.is_object() || !m.extra.contains(lora_extra_key))
    bad_manifest(where + ": extra has no 'lora': the checkpoint holds a whole model, not LoRA adapters");
  try {
    return model::lora_from_json(m.extra.at(lora_extra_key), where + ": extra.lora");
  } catch (const model::model_error& e) {
    bad_manifest(e.what());
  }
}

std::map<std::string, adapter> read_adapters(const std::string& ckpt_dir, const manifest& m, const std::string& where) {
  std::map<std::string, adapter> out;
  reshard_reader reader(ckpt_dir, m);
  const std::string prefix = param_tensor_prefix;
  for (const auto& t : m.tensors) {
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = t.name.substr(prefix.size());
    if (model::is_vocab_parameter(name)) continue;  // a grown vocabulary's weight, trained whole
    const std::string module = model::module_of_adapter(name);
    if (module.empty() || t.dtype != "F32" || t.shape.size() != 2)
      bad_manifest(where + ": tensor '" + t.name + "' is not a 2-D F32 LoRA adapter (<module>.lora_A.weight or .lora_B.weight)");
    auto& a = out[module];
    const bool is_a = name == model::lora_a_name(module);
    auto& values = is_a ? a.a : a.b;
    values.resize(static_cast<std::size_t>(t.numel()));
    reader.read(t.name, 0, t.numel(), reinterpret_cast<char*>(values.data()));
    (is_a ? a.a_shape : a.b_shape) = t.shape;
  }
  if (out.empty()) bad_manifest(where + ": no LoRA adapter tensors to export");
  for (const auto& [module, a] : out) {
    if (a.a.empty() || a.b.empty() || a.a_shape[0] != a.b_shape[1])
      bad_manifest(where + ": module " + module + " lacks lora_A or lora_B, or their ranks differ");
  }
  return out;
}

// LoRA with a grown vocabulary: the embedding and head (and its bias) a checkpoint holds whole
// beside the adapters (they trained as peft's modules_to_save), by Hugging Face name.
std::map<std::string, const logical_tensor*> whole_weights(const manifest& m) {
  std::map<std::string, const logical_tensor*> out;
  const std::string prefix = param_tensor_prefix;
  for (const auto& t : m.tensors) {
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = t.name.substr(prefix.size());
    if (model::is_vocab_parameter(name)) out[name] = &t;
  }
  return out;
}

// The weight of `whole` that stands for base tensor `name` (stored as the checkpoint names it, or
// without the base model's prefix); null when none does.
const logical_tensor* whole_weight_of(const std::map<std::string, const logical_tensor*>& whole,
                                      const std::string& name) {
  for (const std::string prefix : {"", "model.", "transformer."}) {
    const auto it = whole.find(prefix + name);
    if (it != whole.end()) return it->second;
  }
  return nullptr;
}

// The safetensors files of a base Hugging Face directory: model.safetensors, or the index's shards.
std::vector<std::unique_ptr<model::safetensors_reader>> open_base(const std::string& dir) {
  const auto bad = [&](const std::string& what) { throw ckpt_error(ckpt_errc::bad_input, dir + ": " + what); };
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_regular_file(fs::path(dir) / model::hf_weights_name, ec)) {
    files.push_back(model::hf_weights_name);
  } else if (fs::is_regular_file(fs::path(dir) / model::hf_index_name, ec)) {
    std::ifstream in(fs::path(dir) / model::hf_index_name);
    json index;
    try {
      index = json::parse(in);
      for (const auto& [tensor, file] : index.at("weight_map").items()) {
        (void)tensor;
        const auto f = file.get<std::string>();
        if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
      }
    } catch (const json::exception& e) {
      bad(std::string(model::hf_index_name) + " is not an index of safetensors files: " + e.what());
    }
  } else {
    bad("the LoRA adapters' base model is not there (no model.safetensors or index); the merged export "
        "reads the base's weights, export the adapters alone with `cohort-ckpt export --peft`");
  }
  std::vector<std::unique_ptr<model::safetensors_reader>> readers;
  try {
    for (const auto& f : files) readers.push_back(std::make_unique<model::safetensors_reader>((fs::path(dir) / f).string()));
  } catch (const model::model_error& e) {
    bad(e.what());
  }
  return readers;
}

// A base tensor's values in fp32 (F32, F16, BF16) in `out`, its bytes read into `raw`.
void read_f32(const model::safetensors_reader& r, const model::tensor_entry& e, std::vector<char>& raw,
              std::vector<float>& out) {
  raw.resize(e.nbytes());
  r.read(e, raw.data());
  const std::size_t n = e.nbytes() / model::safetensors_dtype_size(e.dtype);
  out.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (e.dtype == "F32") {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    } else {
      std::uint16_t h = 0;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = e.dtype == "BF16" ? f32_from_bf16(h) : f32_from_f16(h);
    }
  }
}

bool is_float(const std::string& dtype) { return dtype == "F32" || dtype == "F16" || dtype == "BF16"; }

// The adapter of base tensor `name`: its module as stored, or with the base model's prefix that
// Hugging Face directories may leave out ("model.", "transformer.").
adapter* adapter_of(std::map<std::string, adapter>& adapters, const std::string& name) {
  const std::string module = model::module_of_weight(name);
  if (module == name) return nullptr;
  for (const std::string prefix : {"", "model.", "transformer."}) {
    const auto it = adapters.find(prefix + module);
    if (it != adapters.end()) return &it->second;
  }
  return nullptr;
}

// W += scaling · B A: W (out, in), or (in, out) for Conv1D.
void merge(std::vector<float>& w, const std::vector<std::int64_t>& shape, const adapter& a, double scaling,
           bool conv1d, const std::string& what) {
  const std::int64_t r = a.a_shape[0], in = a.a_shape[1], out = a.b_shape[0];
  const std::vector<std::int64_t> expected = conv1d ? std::vector<std::int64_t>{in, out} : std::vector<std::int64_t>{out, in};
  if (shape != expected)
    throw ckpt_error(ckpt_errc::bad_input, what + ": the base's weight has another shape than its LoRA adapters (" +
                                               std::to_string(out) + " x " + std::to_string(in) + ")");
  std::vector<double> row(static_cast<std::size_t>(in));
  for (std::int64_t o = 0; o < out; ++o) {
    std::fill(row.begin(), row.end(), 0.0);
    for (std::int64_t k = 0; k < r; ++k) {
      const double bk = a.b[static_cast<std::size_t>(o * r + k)];
      const float* ak = a.a.data() + k * in;
      for (std::int64_t i = 0; i < in; ++i) row[static_cast<std::size_t>(i)] += bk * ak[i];
    }
    for (std::int64_t i = 0; i < in; ++i) {
      auto& x = w[static_cast<std::size_t>(conv1d ? i * out + o : o * in + i)];
      x = static_cast<float>(x + scaling * row[static_cast<std::size_t>(i)]);
    }
  }
}

// One weight of a merged LoRA export: a base tensor (the adapters merged in where they adapt it),
// or a weight the checkpoint holds whole in its place (`whole`: a grown vocabulary's).
struct merged_tensor {
  const model::safetensors_reader* reader = nullptr;
  const model::tensor_entry* entry = nullptr;
  const logical_tensor* whole = nullptr;
  std::uint64_t out_bytes = 0;
  const std::vector<std::int64_t>& shape() const { return whole ? whole->shape : entry->shape; }
};

// The merged export's weights, in name order: every base tensor, those the checkpoint holds whole
// taken from it; a tied head's redundant copy in the base goes when the embedding grew.
std::vector<merged_tensor> plan_merged(const std::vector<std::unique_ptr<model::safetensors_reader>>& readers,
                                       const std::map<std::string, const logical_tensor*>& whole,
                                       const model::model_config& cfg, bool bf16) {
  std::vector<merged_tensor> tensors;
  for (const auto& r : readers) {
    for (const auto& e : r->tensors()) {
      if (cfg.tie_word_embeddings && e.name == "lm_head.weight" && !whole.empty()) continue;
      merged_tensor t{r.get(), &e, whole_weight_of(whole, e.name), 0};
      if (t.whole)
        t.out_bytes = t.whole->numel() * (bf16 ? 2 : 4);
      else
        t.out_bytes = is_float(e.dtype) ? e.nbytes() / model::safetensors_dtype_size(e.dtype) * (bf16 ? 2 : 4) : e.nbytes();
      tensors.push_back(t);
    }
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const merged_tensor& a, const merged_tensor& b) { return a.entry->name < b.entry->name; });
  return tensors;
}

void write_merged(const std::string& ckpt_dir, const manifest& m, const model::model_config& cfg, bool bf16,
                  std::uint64_t max_shard_bytes, const std::string& out_dir, const std::string& where,
                  hf_export_stats& stats) {
  const model::lora_config lora = lora_of(m, where);
  auto adapters = read_adapters(ckpt_dir, m, where);
  const auto whole = whole_weights(m);
  const auto readers = open_base(lora.base);
  const auto tensors = plan_merged(readers, whole, cfg, bf16);
  std::vector<std::uint64_t> sizes;
  for (const auto& t : tensors) {
    sizes.push_back(t.out_bytes);
    stats.weight_bytes += t.out_bytes;
  }
  const auto shards = model::plan_hf_shards(sizes, max_shard_bytes);
  std::map<std::string, std::string> weight_map;
  reshard_reader checkpoint(ckpt_dir, m);
  std::vector<char> raw;
  std::vector<float> values;
  std::size_t whole_written = 0;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const std::string file = model::hf_weights_file_name(s, shards.size());
    std::vector<model::tensor_header> headers;
    for (std::size_t i : shards[s]) {
      const auto& t = tensors[i];
      const bool f = t.whole || is_float(t.entry->dtype);
      headers.push_back({t.entry->name, f ? (bf16 ? "BF16" : "F32") : t.entry->dtype, t.shape(), t.out_bytes});
      weight_map[t.entry->name] = file;
    }
    try {
      model::safetensors_writer writer((fs::path(out_dir) / file).string(), headers);
      for (std::size_t i : shards[s]) {
        const auto& t = tensors[i];
        if (t.whole) {  // trained whole: the checkpoint's fp32 values
          values.resize(static_cast<std::size_t>(t.whole->numel()));
          checkpoint.read(t.whole->name, 0, t.whole->numel(), reinterpret_cast<char*>(values.data()));
          ++whole_written;
        } else if (!is_float(t.entry->dtype)) {  // a buffer (GPT-2's attention mask, say) as it is
          raw.resize(t.entry->nbytes());
          t.reader->read(*t.entry, raw.data());
          writer.write(raw.data(), raw.size());
          continue;
        } else {
          read_f32(*t.reader, *t.entry, raw, values);
          if (adapter* a = adapter_of(adapters, t.entry->name)) {
            merge(values, t.entry->shape, *a, lora.scaling(), cfg.conv1d, t.reader->path() + ": tensor '" + t.entry->name + "'");
            a->merged = true;
          }
        }
        if (bf16) to_bf16_in_place(reinterpret_cast<char*>(values.data()), values.size());
        writer.write(values.data(), t.out_bytes);
        ++stats.tensors;
      }
      writer.finish();
    } catch (const model::model_error& e) {
      throw ckpt_error(ckpt_errc::io, e.what());
    }
    stats.files.push_back(file);
    stats.largest_buffer_bytes = std::max<std::uint64_t>(stats.largest_buffer_bytes, raw.capacity() + 4 * values.capacity());
  }
  for (const auto& [module, a] : adapters) {
    if (!a.merged)
      throw ckpt_error(ckpt_errc::bad_input, lora.base + ": the base model has no weight " + module +
                                                 ".weight for the checkpoint's LoRA adapters; it is not the model they were trained on");
  }
  if (whole_written != whole.size())
    throw ckpt_error(ckpt_errc::bad_input, lora.base + ": the base model lacks the embedding or head the checkpoint "
                                           "trained whole for its grown vocabulary; it is not the model they were trained on");
  if (shards.size() > 1) {
    write_file_durable((fs::path(out_dir) / model::hf_index_name).string(),
                       model::hf_weights_index(stats.weight_bytes, weight_map).dump(2) + "\n");
    stats.files.push_back(model::hf_index_name);
  }
}

void make_out_dir(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw ckpt_error(ckpt_errc::io, out_dir + ": cannot create the export directory: " + ec.message());
}

void check_options(const hf_export_options& options) {
  if (options.dtype != "fp32" && options.dtype != "bf16") {
    throw ckpt_error(ckpt_errc::bad_input, "export dtype '" + options.dtype + "' is not supported (use fp32 or bf16)");
  }
  if (options.max_shard_bytes == 0) throw ckpt_error(ckpt_errc::bad_input, "export max_shard_bytes must be positive");
}

}  // namespace

bool is_lora_checkpoint(const std::string& ckpt_dir) {
  const manifest m = read_manifest(ckpt_dir);
  return m.extra.is_object() && m.extra.contains(lora_extra_key);
}

namespace {

// A peft export's tensors besides the adapters: the weights trained whole (peft's
// modules_to_save), by their names in the export, the embedding first, then the head; a tied head
// also as lm_head.weight, so that peft's copy of the head gets the trained rows too.
std::vector<std::pair<std::string, const logical_tensor*>> saved_modules(const manifest& m, const model::model_config& cfg) {
  std::vector<std::pair<std::string, const logical_tensor*>> out;
  const auto whole = whole_weights(m);
  for (const auto& [name, t] : whole) {
    if (name == "lm_head.weight" || name == "lm_head.bias") continue;
    out.emplace_back(name, t);
    if (cfg.tie_word_embeddings) out.emplace_back("lm_head.weight", t);
  }
  for (const auto& [name, t] : whole)
    if (name == "lm_head.weight" || name == "lm_head.bias") out.emplace_back(name, t);
  return out;
}

// "model.embed_tokens.weight" -> "embed_tokens": the module name peft's modules_to_save matches.
std::vector<std::string> modules_to_save(const std::vector<std::pair<std::string, const logical_tensor*>>& saved) {
  std::vector<std::string> out;
  for (const auto& entry : saved) {
    const std::string module = model::module_of_weight(entry.first);
    const std::string last = module.substr(module.rfind('.') + 1);  // npos + 1 == 0: the whole name
    if (std::find(out.begin(), out.end(), last) == out.end()) out.push_back(last);
  }
  return out;
}

}  // namespace

hf_export_stats export_peft(const std::string& ckpt_dir, const std::string& out_dir, const hf_export_options& options) {
  check_options(options);
  const bool bf16 = options.dtype == "bf16";
  const std::size_t elem = bf16 ? 2 : 4;
  const manifest m = verified_manifest(ckpt_dir, options.verify);
  const std::string where = (fs::path(ckpt_dir) / manifest_name).string();
  const model::model_config cfg = model_config_of(m, where);
  const model::lora_config lora = lora_of(m, where);
  const auto adapters = read_adapters(ckpt_dir, m, where);
  const auto saved = saved_modules(m, cfg);
  make_out_dir(out_dir);
  hf_export_stats stats;
  write_file_durable((fs::path(out_dir) / "adapter_config.json").string(),
                     model::peft_adapter_config(lora, cfg, modules_to_save(saved)).dump(2) + "\n");
  stats.files.push_back("adapter_config.json");
  std::vector<model::tensor_header> headers;
  for (const auto& [module, a] : adapters) {
    for (const bool is_a : {true, false}) {
      const auto& shape = is_a ? a.a_shape : a.b_shape;
      const std::uint64_t n = (is_a ? a.a : a.b).size();
      headers.push_back({model::peft_tensor_prefix + (is_a ? model::lora_a_name(module) : model::lora_b_name(module)),
                         bf16 ? "BF16" : "F32", shape, n * elem});
      stats.weight_bytes += headers.back().nbytes;
    }
  }
  for (const auto& [name, t] : saved) {
    headers.push_back({model::peft_tensor_prefix + name, bf16 ? "BF16" : "F32", t->shape, t->numel() * elem});
    stats.weight_bytes += headers.back().nbytes;
  }
  try {
    model::safetensors_writer writer((fs::path(out_dir) / "adapter_model.safetensors").string(), headers);
    std::vector<float> buffer;
    const auto write = [&] {
      if (bf16) to_bf16_in_place(reinterpret_cast<char*>(buffer.data()), buffer.size());
      writer.write(buffer.data(), buffer.size() * elem);
      ++stats.tensors;
      stats.largest_buffer_bytes = std::max<std::uint64_t>(stats.largest_buffer_bytes, 4 * buffer.size());
    };
    for (const auto& [module, a] : adapters) {
      for (const auto* values : {&a.a, &a.b}) {
        buffer = *values;
        write();
      }
    }
    reshard_reader checkpoint(ckpt_dir, m);
    for (const auto& [name, t] : saved) {
      buffer.resize(static_cast<std::size_t>(t->numel()));
      checkpoint.read(t->name, 0, t->numel(), reinterpret_cast<char*>(buffer.data()));
      write();
    }
    writer.finish();
  } catch (const model::model_error& e) {
    throw ckpt_error(ckpt_errc::io, e.what());
  }
  stats.files.push_back("adapter_model.safetensors");
  fsync_path(out_dir);
  return stats;
}

namespace {

// A T5's config.json object from a manifest whose extra.model_config is one.
model::t5_config t5_config_of(const manifest& m, const std::string& where) {
  try {
    return model::parse_t5_config(m.extra.at("model_config"), where + ": extra.model_config");
  } catch (const model::model_error& e) {
    bad_manifest(e.what());
  }
}

}  // namespace

hf_export_stats export_hf(const std::string& ckpt_dir, const std::string& out_dir, const hf_export_options& options) {
  check_options(options);
  const bool bf16 = options.dtype == "bf16";
  const manifest m = verified_manifest(ckpt_dir, options.verify);
  const std::string where = (fs::path(ckpt_dir) / manifest_name).string();
  // A T5 (seq2seq jobs) exports as save_t5_model writes it; its checkpoints hold no LoRA.
  const bool t5 = m.extra.is_object() && m.extra.contains("model_config") && model::is_t5(m.extra.at("model_config"));
  model::t5_config t5_cfg;
  model::model_config cfg;
  if (t5)
    t5_cfg = t5_config_of(m, where);
  else
    cfg = model_config_of(m, where);
  const std::vector<std::string> tokenizer_files = tokenizer_files_of(m, where);
  const bool lora = !t5 && m.extra.is_object() && m.extra.contains(lora_extra_key);
  const bool tied = t5 ? t5_cfg.tie_word_embeddings : cfg.tie_word_embeddings;
  const std::vector<export_tensor> weights = lora ? std::vector<export_tensor>{} : plan_weights(m, tied, bf16 ? 2 : 4, where);
  make_out_dir(out_dir);
  try {
    model::remove_hf_weights(out_dir);
  } catch (const model::model_error& e) {
    throw ckpt_error(ckpt_errc::io, e.what());
  }
  hf_export_stats stats;
  cfg.dtype = t5_cfg.dtype = bf16 ? "bfloat16" : "float32";
  write_file_durable((fs::path(out_dir) / "config.json").string(),
                     (t5 ? model::to_hf_json(t5_cfg) : model::to_hf_json(cfg)).dump(2) + "\n");
  stats.files.push_back("config.json");
  if (lora) {
    write_merged(ckpt_dir, m, cfg, bf16, options.max_shard_bytes, out_dir, where, stats);
  } else {
    write_weights(ckpt_dir, m, weights, bf16, options, out_dir, stats);
  }
  copy_tokenizer_files(tokenizer_files, out_dir, stats);
  const auto added = added_tokens_of(m.extra, where);
  if (!added.empty() && tokenizer_files.empty())
    stats.warnings.push_back("the data set's added tokens are not recorded: the export carries no tokenizer files");
  add_tokens_to_tokenizer_files(out_dir, added);
  fsync_path(out_dir);
  return stats;
}

}  // namespace cohort::core::ckpt

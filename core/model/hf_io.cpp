// Hugging Face directory I/O: name mapping checks, dtype conversion and sharding.
#include "core/model/hf_io.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <torch/utils.h>

#include "core/model/hf_files.hpp"
#include "core/model/hf_layout.hpp"
#include "core/model/model_error.hpp"
#include "core/model/safetensors.hpp"

namespace cohort::core::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* safetensors_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return "F32";
    case torch::kHalf: return "F16";
    case torch::kBFloat16: return "BF16";
    default: break;
  }
  throw model_error(model_errc::bad_input, std::string("cannot save weights of dtype ") +
                                               c10::toString(t) + " (use float32, float16 or bfloat16)");
}

// Tensors that transformers keeps as non-persistent buffers or drops on load; `tied`: the model
// ties lm_head to the input embeddings, so a stored lm_head.weight is redundant.
bool ignorable(const std::string& name, bool tied) {
  const auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  // T5 checkpoints of transformers 4 may hold the stacks' embed_tokens, copies of shared.weight.
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends("rotary_emb.inv_freq") ||
         ends("attn.embed_positions") || (tied && name == "lm_head.weight") ||
         name == "encoder.embed_tokens.weight" || name == "decoder.embed_tokens.weight";
}

// The base model's prefix, which a checkpoint saved from the base model (openai-community/gpt2)
// drops: GPT-2 and GPT-J weights live under "transformer.", the others under "model.".
std::string base_prefix(const std::vector<hf_parameter>& expected) {
  for (const auto& p : expected) {
    if (p.name.rfind("transformer.", 0) == 0) return "transformer.";
  }
  return "model.";
}

// Where each tensor lives: the index's weight_map (tensor -> file name; `files` gets each file
// once, in order), or, without an index, nothing (`files` is the one model.safetensors).
std::map<std::string, std::string> weight_files(const hf_files& dir, std::vector<std::string>& files) {
  std::map<std::string, std::string> where;
  const fs::path index = fs::path(dir.dir) / hf_index_name;
  const std::string index_name = dir.where + "/" + hf_index_name;
  if (fs::exists(index)) {
    std::ifstream in(index);
    std::stringstream text;
    text << in.rdbuf();
    json j = json::parse(text.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      throw model_error(model_errc::bad_safetensors,
                        index_name + ": not a JSON object with a 'weight_map' object");
    }
    std::set<std::string> seen;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) {
        throw model_error(model_errc::bad_safetensors,
                          index_name + ": weight_map entry '" + it.key() + "' is not a file name");
      }
      const std::string file = it->get<std::string>();
      if (file.find('/') != std::string::npos || file == "..") {
        throw model_error(model_errc::bad_safetensors, index_name + ": weight_map entry '" + it.key() +
                                                           "' names '" + file +
                                                           "', which is not a file in the directory");
      }
      where[it.key()] = file;
      if (seen.insert(file).second) files.push_back(file);
    }
    return where;
  }
  files.push_back(hf_weights_name);
  return where;  // empty: every tensor is in the single file
}

void write_text(const fs::path& path, const std::string& text) {
  const std::string tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw model_error(model_errc::io, tmp + ": write failed");
  }
  fs::rename(tmp, path);
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

torch::ScalarType dtype_from_name(const std::string& n) {
  if (n == "float32" || n == "F32" || n == "fp32") return torch::kFloat;
  if (n == "float16" || n == "F16" || n == "fp16") return torch::kHalf;
  if (n == "bfloat16" || n == "BF16" || n == "bf16") return torch::kBFloat16;
  throw model_error(model_errc::bad_input,
                    "unsupported dtype '" + n + "' (supported: float32, float16, bfloat16)");
}

hf_weight_files open_hf_weight_files(const std::string& dir,
                                     const std::vector<hf_parameter>& expected,
                                     const std::string& model) {
  return open_hf_weight_files(local_hf_files(dir), expected, model);
}

bool hf_has_tensor(const hf_files& dir, const std::string& name) {
  std::vector<std::string> files;
  const auto where = weight_files(dir, files);
  if (!where.empty()) return where.count(name) > 0;
  auto file = dir.open(files.front());
  if (!file) return false;
  return safetensors_reader(std::move(file)).find(name) != nullptr;
}

hf_weight_files open_hf_weight_files(const hf_files& dir, const std::vector<hf_parameter>& expected,
                                     const std::string& model) {
  hf_weight_files out;
  std::vector<std::string> files;
  const auto where = weight_files(dir, files);
  std::map<std::string, const safetensors_reader*> readers;  // by file name
  for (const auto& name : files) {
    auto file = dir.open(name);
    if (!file && where.empty())
      throw model_error(model_errc::bad_weights,
                        dir.where +
                            ": no model.safetensors or model.safetensors.index.json (only "
                            "safetensors weights are read; convert pytorch_model.bin first)");
    if (!file)
      throw model_error(model_errc::bad_weights, dir.where + "/" + hf_index_name + ": names '" + name +
                                                     "', which is not in the directory");
    out.readers.push_back(std::make_unique<safetensors_reader>(std::move(file)));
    readers[name] = out.readers.back().get();
  }
  const std::string prefix = base_prefix(expected);

  bool tied = true;
  std::set<std::string> used;  // file + "\n" + tensor
  for (const auto& p : expected) {
    if (p.name == "lm_head.weight") tied = false;
    // A checkpoint saved from the base model (openai-community/gpt2) drops the prefix.
    std::string name = p.name;
    std::string file = files.front();
    const std::string bare = p.name.rfind(prefix, 0) == 0 ? p.name.substr(prefix.size()) : p.name;
    if (!where.empty()) {
      auto it = where.find(name);
      if (it == where.end()) it = where.find(name = bare);
      if (it == where.end()) {
        throw model_error(model_errc::bad_weights, dir.where + "/" + hf_index_name + ": missing tensor '" +
                                                       p.name + "' (a weight of " + model + ")");
      }
      file = it->second;
      if (!readers.at(file)->find(name)) {
        throw model_error(model_errc::bad_weights, readers.at(file)->path() + ": missing tensor '" + name +
                                                       "' (the index says it is in this file)");
      }
    } else if (!readers.at(file)->find(name)) {
      if (readers.at(file)->find(bare)) {
        name = bare;
      } else {
        throw model_error(model_errc::bad_weights, readers.at(file)->path() + ": missing tensor '" + p.name +
                                                       "' (a weight of " + model + ")");
      }
    }
    const safetensors_reader& reader = *readers.at(file);
    const tensor_entry& e = reader.at(name);
    const auto shape = p.tensor.sizes().vec();
    if (e.shape != shape) {
      throw model_error(model_errc::bad_weights, reader.path() + ": tensor '" + name + "' has shape " +
                                                     shape_text(e.shape) + " but config.json implies " +
                                                     shape_text(shape));
    }
    torch::ScalarType dtype;
    try {
      dtype = dtype_from_name(e.dtype);
    } catch (const model_error&) {
      throw model_error(model_errc::bad_weights, reader.path() + ": tensor '" + name + "' has dtype " +
                                                     e.dtype + "; weights must be F32, F16 or BF16");
    }
    out.tensors.push_back({&reader, &e, dtype});
    used.insert(file + "\n" + name);
  }
  for (const auto& [file, reader] : readers) {
    for (const auto& e : reader->tensors()) {
      if (used.count(file + "\n" + e.name) || ignorable(e.name, tied)) continue;
      throw model_error(model_errc::bad_weights,
                        reader->path() + ": unexpected tensor '" + e.name + "': not a weight of " + model);
    }
  }
  return out;
}

const char* config_dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kHalf: return "float16";
    case torch::kBFloat16: return "bfloat16";
    default: return "float32";
  }
}

void load_hf_weights(decoder_impl& model, const std::string& dir) {
  load_hf_weights(model.hf_parameters(), dir,
                  std::string("a ") + family_name(model.config().fam) + " model with this config.json");
}

void load_hf_weights(const std::vector<hf_parameter>& params, const std::string& dir,
                     const std::string& model) {
  const hf_weight_files files = open_hf_weight_files(dir, params, model);
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const hf_tensor_file& t = files.tensors[i];
    auto staging = torch::empty(t.entry->shape, torch::TensorOptions().dtype(t.dtype));
    t.reader->read(*t.entry, staging.data_ptr());
    auto target = params[i].tensor;
    target.copy_(staging);
  }
}

decoder load_hf_model(const std::string& dir, const load_options& options) {
  model_config cfg = read_config(dir);
  const torch::ScalarType dtype = options.dtype ? *options.dtype : dtype_from_name(cfg.dtype);
  cfg.dtype = config_dtype_name(dtype);
  decoder model(cfg, torch::TensorOptions().dtype(dtype).device(options.device), false);
  load_hf_weights(*model, dir);
  model->eval();  // as from_pretrained returns it; train() turns dropout on
  return model;
}

torch::ScalarType save_dtype(const std::vector<hf_parameter>& params, const save_options& options) {
  if (options.dtype) return *options.dtype;
  return params.empty() ? torch::kFloat : params.front().tensor.scalar_type();
}

void save_hf_model(const decoder_impl& model, const std::string& dir, const save_options& options) {
  const torch::ScalarType dtype = save_dtype(model.hf_parameters(), options);
  model_config cfg = model.config();
  cfg.dtype = config_dtype_name(dtype);
  save_hf_files(model.hf_parameters(), to_hf_json(cfg), dtype, dir, options);
}

void save_hf_files(const std::vector<hf_parameter>& params, const json& config,
                   torch::ScalarType dtype, const std::string& dir, const save_options& options) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw model_error(model_errc::io, dir + ": cannot create directory: " + ec.message());
  remove_hf_weights(dir);  // stale weights would confuse loaders
  write_text(fs::path(dir) / "config.json", config.dump(2) + "\n");

  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& p : params) {
    tensors.emplace_back(p.name, p.tensor.detach().to(torch::kCPU, dtype).contiguous());
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0;
  for (const auto& [name, t] : tensors) {
    sizes.push_back(static_cast<std::uint64_t>(t.numel()) * t.element_size());
    total += sizes.back();
  }
  const auto shards = plan_hf_shards(sizes, options.max_shard_bytes);
  std::map<std::string, std::string> weight_map;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const std::string file = hf_weights_file_name(s, shards.size());
    std::vector<tensor_blob> blobs;
    for (std::size_t i : shards[s]) {
      const auto& [name, t] = tensors[i];
      blobs.push_back({name, safetensors_dtype(dtype), t.sizes().vec(), t.data_ptr(), sizes[i]});
      weight_map[name] = file;
    }
    write_safetensors((fs::path(dir) / file).string(), blobs);
  }
  if (shards.size() > 1) {
    write_text(fs::path(dir) / hf_index_name, hf_weights_index(total, weight_map).dump(2) + "\n");
  }

  if (options.copy_files_from.empty()) return;
  const fs::path from(options.copy_files_from);
  if (fs::exists(from) && fs::equivalent(from, dir)) return;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                           "special_tokens_map.json", "vocab.json", "merges.txt",
                           "added_tokens.json", "chat_template.jinja", "generation_config.json"}) {
    if (!fs::exists(from / name)) continue;
    fs::copy_file(from / name, fs::path(dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) throw model_error(model_errc::io, (from / name).string() + ": cannot copy: " + ec.message());
  }
}

}  // namespace cohort::core::model

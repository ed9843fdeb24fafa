// compute_device, dtype_of and tokenizer_files: the engines' shared set-up.
#include "core/train/engine_common.hpp"

#include <sys/stat.h>

#include <stdexcept>

#include "core/train/causal_lm_engine.hpp"

namespace cohort::core::train {

namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

nlohmann::json tokenizer_files(const config::job_spec& spec, const data::manifest& data) {
  nlohmann::json files = nlohmann::json::array();
  std::string dir = spec.model.hf_dir;
  if (dir.empty() && !data.tokenizer_path.empty() && is_file(data.tokenizer_path)) {
    files.push_back(data.tokenizer_path);
    dir = parent_of(data.tokenizer_path);
  }
  if (dir.empty()) return files;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                           "special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json",
                           "chat_template.jinja", "generation_config.json", "spiece.model"}) {
    const std::string path = dir + "/" + name;
    if (is_file(path) && path != data.tokenizer_path)
      files.push_back(path);
  }
  return files;
}

torch::Device compute_device(const config::job_spec& spec, int rank) {
  if (!spec.scaling.use_gpu) return torch::kCPU;
  const int index = causal_lm_engine::cuda_device_for(rank);
  if (index < 0)
    throw std::invalid_argument("scaling.use_gpu is true but this worker sees no CUDA device");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

torch::ScalarType dtype_of(config::precision p) {
  return p == config::precision::bf16 ? torch::kBFloat16 : torch::kFloat;
}

}  // namespace cohort::core::train

// load_tokenizer(): picks the implementation by file name or directory content.
#include <filesystem>

#include "core/tokenizer/hf_tokenizer.hpp"
#include "core/tokenizer/sentencepiece_tokenizer.hpp"
#include "core/tokenizer/tokenizer.hpp"

namespace cohort::core::tokenizer {

std::unique_ptr<tokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::is_regular_file(dir / "tokenizer.json", ec)) return std::make_unique<hf_tokenizer>((dir / "tokenizer.json").string());
    for (const char* name : {"tokenizer.model", "spiece.model"}) {
      if (fs::is_regular_file(dir / name, ec)) return std::make_unique<sentencepiece_tokenizer>((dir / name).string());
    }
    throw tokenizer_error(path + ": the directory has neither tokenizer.json nor tokenizer.model (nor spiece.model)");
  }
  if (!fs::exists(path, ec)) throw tokenizer_error(path + ": no such tokenizer file or directory");
  if (fs::path(path).extension() == ".json") return std::make_unique<hf_tokenizer>(path);
  return std::make_unique<sentencepiece_tokenizer>(path);
}

}  // namespace cohort::core::tokenizer

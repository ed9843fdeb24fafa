// `cohort-model tokenize`: a text's token ids as JSON (see tokenize_command.hpp).
#include "tools/cohort-model/tokenize_command.hpp"

#include <nlohmann/json.hpp>

#include <iostream>
#include <optional>
#include <string>

#include "core/tokenizer/tokenizer.hpp"

namespace cohort::tools {
namespace {

constexpr const char* usage =
    "usage: cohort-model tokenize --tokenizer FILE|DIR (--text STRING [--add-bos] [--add-eos] |\n"
    "                             --decode '[ID, ...]')\n"
    "  --tokenizer  tokenizer.json (Hugging Face BPE or Unigram), a sentencepiece model (tokenizer.model,\n"
    "               T5's spiece.model) or a directory holding one of them\n"
    "  --text       the text to encode; literal special tokens become their ids\n"
    "  --add-bos    prepend the tokenizer's BOS id; --add-eos appends its EOS id\n"
    "  --decode     token ids (a JSON list) to turn back into text\n"
    "Prints the token ids as a JSON list, or with --decode the text as a JSON string.\n";

}  // namespace

int run_tokenize_command(int argc, char** argv) {
  std::optional<std::string> tokenizer_path, text, decode;
  bool add_bos = false, add_eos = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&](const char* name) -> std::optional<std::string> {
      if (i + 1 >= argc) {
        std::cerr << "tokenize: " << name << " needs a value\n" << usage;
        return std::nullopt;
      }
      return std::string(argv[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      return 0;
    } else if (arg == "--tokenizer") {
      if (!(tokenizer_path = value("--tokenizer"))) return 2;
    } else if (arg == "--text") {
      if (!(text = value("--text"))) return 2;
    } else if (arg == "--decode") {
      if (!(decode = value("--decode"))) return 2;
    } else if (arg == "--add-bos") {
      add_bos = true;
    } else if (arg == "--add-eos") {
      add_eos = true;
    } else {
      std::cerr << "tokenize: unknown argument \"" << arg << "\"\n" << usage;
      return 2;
    }
  }
  if (!tokenizer_path || (!text && !decode) || (text && decode)) {
    std::cerr << "tokenize: " << (!tokenizer_path ? "--tokenizer is required" : "give one of --text and --decode")
              << "\n" << usage;
    return 2;
  }
  std::vector<core::tokenizer::token_id> to_decode;
  if (decode) {
    const auto list = nlohmann::json::parse(*decode, nullptr, false);
    bool ok = list.is_array();
    if (ok)
      for (const auto& v : list) ok = ok && v.is_number_integer() && v.get<std::int64_t>() >= 0;
    if (!ok) {
      std::cerr << "tokenize: --decode takes a JSON list of token ids (integers, 0 or more), not " << *decode << "\n";
      return 2;
    }
    for (const auto& v : list) to_decode.push_back(v.get<core::tokenizer::token_id>());
  }
  try {
    const auto tok = core::tokenizer::load_tokenizer(*tokenizer_path);
    if (decode) {
      std::cout << nlohmann::json(tok->decode(to_decode)).dump() << '\n';
      return 0;
    }
    std::vector<core::tokenizer::token_id> ids;
    if (add_bos) {
      const auto bos = tok->bos_id();
      if (!bos) throw core::tokenizer::tokenizer_error(*tokenizer_path + " defines no BOS token; drop --add-bos");
      ids.push_back(*bos);
    }
    const auto body = tok->encode(*text);
    ids.insert(ids.end(), body.begin(), body.end());
    if (add_eos) {
      const auto eos = tok->eos_id();
      if (!eos) throw core::tokenizer::tokenizer_error(*tokenizer_path + " defines no EOS token; drop --add-eos");
      ids.push_back(*eos);
    }
    std::cout << nlohmann::json(ids).dump() << '\n';
    return 0;
  } catch (const core::tokenizer::tokenizer_error& e) {
    std::cerr << "tokenize: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace cohort::tools


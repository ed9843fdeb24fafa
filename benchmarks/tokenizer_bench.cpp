// tokenizer_bench: single-thread encode throughput of a cohort tokenizer against libsentencepiece
// on the same model, line by line over a text file (Tiny Shakespeare), and whether every line's
// ids agree. Skips (exit 0, with a message) when the text file is absent.
#include <sentencepiece_processor.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.hpp"
#include "tools/command_line.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct timing {
  double seconds = 0;
  std::size_t tokens = 0;
};

// Best of `repeat` passes over all lines; `encode` returns the number of ids of one line.
template <typename Encode>
timing best_of(int repeat, const std::vector<std::string>& lines, Encode&& encode) {
  timing best{1e300, 0};
  for (int r = 0; r < repeat; ++r) {
    std::size_t tokens = 0;
    const auto t = clock_type::now();
    for (const auto& line : lines) tokens += encode(line);
    const double s = std::chrono::duration<double>(clock_type::now() - t).count();
    if (s < best.seconds) best = {s, tokens};
  }
  return best;
}

void report(const char* name, const timing& t, std::size_t bytes) {
  std::printf("%-34s %8.3f s  %7.2f MB/s  %7.3f M tokens/s  (%zu tokens)\n", name, t.seconds, bytes / t.seconds / 1e6,
              t.tokens / t.seconds / 1e6, t.tokens);
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  std::string tokenizer_path, model_path, text_path;
  int repeat = 3;
  po::options_description desc("tokenizer_bench options");
  desc.add_options()("help,h", "show this help")("tokenizer", po::value(&tokenizer_path)->required(),
                                                  "cohort tokenizer: tokenizer.json, a sentencepiece model or a directory")(
      "sentencepiece", po::value(&model_path)->required(), "the same tokenizer as a sentencepiece .model")(
      "text", po::value(&text_path)->required(), "UTF-8 text, encoded line by line")(
      "repeat", po::value(&repeat), "passes per tokenizer; the best is reported (default 3)");
  po::variables_map vm;
  if (auto done = cohort::tools::read_command_line("tokenizer_bench", argc, argv, desc, vm)) return *done;
  if (!std::filesystem::exists(text_path)) {
    std::cout << "tokenizer_bench: skipped: " << text_path << " is absent (Tiny Shakespeare or another UTF-8 text)\n";
    return 0;
  }
  try {
    std::ifstream in(text_path);
    std::vector<std::string> lines;
    std::size_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
      bytes += line.size();
      lines.push_back(std::move(line));
    }
    const auto tok = cohort::core::tokenizer::load_tokenizer(tokenizer_path);
    sentencepiece::SentencePieceProcessor sp;
    if (const auto status = sp.Load(model_path); !status.ok()) {
      std::cerr << "tokenizer_bench: " << model_path << ": " << status.ToString() << "\n";
      return 1;
    }
    std::size_t differing = 0;
    std::vector<int> sp_ids;
    for (const auto& line : lines) {
      if (!sp.Encode(line, &sp_ids).ok()) throw std::runtime_error("sentencepiece failed to encode a line");
      const auto ids = tok->encode(line);
      if (!std::equal(ids.begin(), ids.end(), sp_ids.begin(), sp_ids.end())) ++differing;
    }
    std::printf("%zu lines, %.2f MB; lines whose ids differ: %zu\n", lines.size(), bytes / 1e6, differing);
    report(tok->identity().substr(0, tok->identity().find(':')).c_str(),
           best_of(repeat, lines, [&](const std::string& l) { return tok->encode(l).size(); }), bytes);
    report("libsentencepiece", best_of(repeat, lines, [&](const std::string& l) {
             sp.Encode(l, &sp_ids);
             return sp_ids.size();
           }),
           bytes);
    return differing == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "tokenizer_bench: " << e.what() << "\n";
    return 1;
  }
}

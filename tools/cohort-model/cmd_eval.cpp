// cohort-model eval: {"loss": x, "logits": [[[...]]]} of a model on input ids, labels = ids (T5:
// the labels of the input file, the logits the decoder's). cohort-model score: {"scores": [[...]]}
// of a sequence classifier (a reward model's export) on input ids.
#include <cmath>
#include <cstdio>
#include <string>

#include "core/model/runner.hpp"
#include "tools/cohort-model/commands.hpp"

namespace po = boost::program_options;

namespace cohort::tools {
namespace {

void print_number(std::string& out, double x) {
  if (!std::isfinite(x)) {  // JSON has no NaN or infinity
    out += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  out += buf;
}

}  // namespace

int run_eval(const arg_list& args) {
  std::string dir, ids_file;
  po::options_description desc("eval options");
  desc.add_options()
      ("hf-dir", po::value(&dir)->required(), "Hugging Face model directory")
      ("input-ids", po::value(&ids_file)->required(), input_ids_help);
  po::variables_map vm;
  if (!parse_options(args, desc, vm, "cohort-model eval --hf-dir DIR --input-ids FILE")) return 0;

  const auto result = core::model::evaluate(dir, core::model::read_model_inputs(ids_file));
  std::string out = "{\"loss\": ";
  print_number(out, result.loss);
  out += ", \"logits\": [";
  std::size_t i = 0;
  for (std::int64_t b = 0; b < result.batch; ++b) {
    out += b ? ", [" : "[";
    for (std::int64_t t = 0; t < result.time; ++t) {
      out += t ? ", [" : "[";
      for (std::int64_t v = 0; v < result.vocab; ++v) {
        if (v) out += ", ";
        print_number(out, result.logits[i++]);
      }
      out += "]";
    }
    out += "]";
  }
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_score(const arg_list& args) {
  std::string dir, ids_file;
  po::options_description desc("score options");
  desc.add_options()("hf-dir", po::value(&dir)->required(),
                     "a …ForSequenceClassification directory (a reward model's export)")(
      "input-ids", po::value(&ids_file)->required(),
      "JSON file {\"input_ids\": [[...], ...]}: equal-length rows, padded after their text with the "
      "model's pad_token_id");
  po::variables_map vm;
  if (!parse_options(args, desc, vm, "cohort-model score --hf-dir DIR --input-ids FILE")) return 0;

  const auto scores = core::model::score_rows(dir, core::model::read_input_ids(ids_file));
  std::string out = "{\"scores\": [";
  for (std::size_t b = 0; b < scores.size(); ++b) {
    out += b ? ", [" : "[";
    for (std::size_t l = 0; l < scores[b].size(); ++l) {
      if (l) out += ", ";
      print_number(out, scores[b][l]);
    }
    out += "]";
  }
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace cohort::tools

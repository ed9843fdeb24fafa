// cohort-model step: one AdamW step after gradient clipping; writes the result as an HF dir.
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/model/runner.hpp"
#include "tools/cohort-model/commands.hpp"

namespace po = boost::program_options;

namespace cohort::tools {

int run_step(const arg_list& args) {
  std::string dir, ids_file, betas, out_dir;
  core::model::step_settings s;
  po::options_description desc("step options");
  desc.add_options()
      ("hf-dir", po::value(&dir)->required(), "Hugging Face model directory to start from")
      ("input-ids", po::value(&ids_file)->required(), input_ids_help)
      ("lr", po::value(&s.lr)->required(), "learning rate")
      ("betas", po::value(&betas)->default_value("0.9,0.999"), "AdamW betas as B1,B2")
      ("eps", po::value(&s.eps)->default_value(1e-8), "AdamW epsilon")
      ("weight-decay", po::value(&s.weight_decay)->default_value(0.01), "decoupled weight decay")
      ("grad-clip", po::value(&s.grad_clip)->default_value(0.0),
       "clip the total gradient L2 norm to this (0 = no clipping)")
      ("out", po::value(&out_dir)->required(), "directory to write the updated model to");
  po::variables_map vm;
  const char* synopsis =
      "cohort-model step --hf-dir DIR --input-ids FILE --lr X [--betas B1,B2] [--eps E] "
      "[--weight-decay W] [--grad-clip C] --out DIR2";
  if (!parse_options(args, desc, vm, synopsis)) return 0;

  std::istringstream in(betas);
  char comma = 0;
  if (!(in >> s.beta1 >> comma >> s.beta2) || comma != ',' || !(in >> std::ws).eof() ||
      s.beta1 < 0 || s.beta1 >= 1 || s.beta2 < 0 || s.beta2 >= 1) {
    throw usage_error("--betas must be two numbers in [0, 1) as B1,B2, got '" + betas + "'");
  }
  if (s.lr < 0 || s.eps <= 0 || s.weight_decay < 0 || s.grad_clip < 0) {
    throw usage_error("--lr, --weight-decay and --grad-clip must be >= 0 and --eps > 0");
  }
  const auto r = core::model::train_one_step(dir, core::model::read_model_inputs(ids_file), s, out_dir);
  std::cout << nlohmann::json{{"loss", r.loss}, {"grad_norm", r.grad_norm}, {"out", out_dir}}.dump()
            << std::endl;
  return 0;
}

}  // namespace cohort::tools

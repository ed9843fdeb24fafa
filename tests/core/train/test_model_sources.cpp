// The three ways a job names its model (a Hugging Face directory, a config file, an inline config
// with init_seed) give the same starting weights, so the same training.
#include <torch/torch.h>

#include "core/model/decoder.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/model_config.hpp"
#include "core/model/weight_source.hpp"
#include "tests/core/train/engine_fixture.hpp"

#include "tests/support/catch_torch.hpp"

#include <fstream>

using namespace cohort;
using cohort::test::temp_dir;

TEST_CASE("hf_dir, a config file and an inline config with the same seed train identically",
          "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  auto inline_spec = test::tiny_job(data, 2, 1, false);
  inline_spec.train.max_steps = 5;

  // The weights an init_seed of 7 draws, saved as a Hugging Face directory.
  const auto cfg = core::model::parse_config(nlohmann::json::parse(test::tiny_llama_config()), "test");
  core::model::decoder model(cfg, torch::TensorOptions().dtype(torch::kFloat), false);
  const auto drawn = core::model::seeded_init(cfg, model->hf_parameters(), 7);
  for (const auto& p : model->hf_parameters()) {
    auto t = p.tensor;
    core::model::fill_parameter(*drawn, p.name, t);
  }
  core::model::save_hf_model(*model, tmp.path("hf"));

  auto hf_spec = inline_spec;
  hf_spec.model = {};
  hf_spec.model.hf_dir = tmp.path("hf");
  auto file_spec = inline_spec;
  file_spec.model = {};
  file_spec.model.config_file = tmp.write("config.json", test::tiny_llama_config());
  file_spec.model.init_seed = 7;

  const auto a = test::run_job(inline_spec);
  const auto b = test::run_job(hf_spec);
  const auto c = test::run_job(file_spec);
  for (std::size_t k = 0; k < 5; ++k) {
    CHECK(b[0].steps[k].loss == a[0].steps[k].loss);
    CHECK(c[0].steps[k].loss == a[0].steps[k].loss);
  }
  CHECK(b[0].weights == a[0].weights);
  CHECK(c[0].weights == a[0].weights);

  auto other_seed = inline_spec;
  other_seed.model.init_seed = 8;
  CHECK(test::run_job(other_seed)[0].steps[0].loss != a[0].steps[0].loss);
}

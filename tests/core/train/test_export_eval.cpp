// A job's exported model is the model it trained: `cohort-model eval` on the export of the
// checkpoint after step k gives the loss the run logged for step k + 1 (same weights, same batch),
// and the job's final model lands in <run>/model.
#include "tests/core/train/engine_fixture.hpp"
#include "tests/core/train/workload_runs.hpp"

#include <catch2/catch.hpp>  // after torch's headers: its CHECK must win

#include <sys/stat.h>

#include <fstream>

#include "core/ckpt/hf_export.hpp"
#include "core/ckpt/layout.hpp"
#include "core/data/batch_loader.hpp"
#include "tests/support/tool_run.hpp"

using namespace cohort;
using cohort::test::temp_dir;

namespace {

constexpr std::int64_t seq_len = 16;

// Pretraining-style data: every sample is seq_len real tokens, every token a label, so a plain
// evaluation (labels = input ids) sees exactly what training saw.
std::string make_packed_dataset(const std::string& dir) {
  core::data::prepare_output_dir(dir);
  core::data::shard_writer_options o;
  o.vocab_size = 300;
  core::data::shard_writer w(dir, o);
  std::uint64_t state = 99;
  for (int i = 0; i < 64; ++i) {
    std::vector<std::int32_t> ids;
    for (std::int64_t t = 0; t < seq_len; ++t) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      ids.push_back(static_cast<std::int32_t>(t > 0 && (state >> 60) != 0 ? 3 + (ids.back() - 2) % 256
                                                                        : 3 + (state >> 33) % 256));
    }
    w.append(ids.data(), seq_len, nullptr);
  }
  core::data::manifest m;
  m.kind = "pretrain";
  m.layout = "pack";
  m.seq_len = seq_len;
  m.eos_id = 2;
  m.vocab_size = 300;
  w.finish(m);
  return dir;
}

// The global batch of step `step` (0-based) as {"input_ids": [[...], ...]}: every rank's
// micro-batches, in rank order.
std::string global_batch_ids(const config::job_spec& spec, std::int64_t step) {
  auto data = std::make_shared<const core::data::dataset>(spec.data.train);
  nlohmann::json rows = nlohmann::json::array();
  for (int rank = 0; rank < spec.scaling.num_workers; ++rank) {
    core::data::loader_options o;
    o.geometry = {spec.scaling.num_workers, spec.train.micro_batch_size, spec.train.grad_accum};
    o.rank = rank;
    o.seed = spec.train.seed;
    core::data::batch_loader loader(data, o);
    loader.seek(step);
    core::data::micro_batch mb;
    for (int m = 0; m < spec.train.grad_accum; ++m) {
      loader.next(mb);
      for (std::int64_t b = 0; b < mb.batch_size; ++b)
        rows.push_back(std::vector<std::int64_t>(mb.tokens.begin() + b * mb.seq_len,
                                                 mb.tokens.begin() + (b + 1) * mb.seq_len));
    }
  }
  return nlohmann::json{{"input_ids", rows}}.dump();
}

double eval_loss(const std::string& hf_dir, const std::string& ids_file) {
  const auto r = test::run_tool("cohort-model", "eval --hf-dir " + hf_dir + " --input-ids " + ids_file);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out)["loss"].get<double>();
}

}  // namespace

TEST_CASE("cohort-model eval on an exported checkpoint gives the loss the run logged for its next step",
          "[core][train][ckpt][tools]") {
  temp_dir tmp;
  auto spec = test::tiny_job(make_packed_dataset(tmp.path("data")), 2, 3, false);
  spec.train.max_steps = 6;
  spec.run.checkpoint.every_steps = 3;
  const auto results = test::run_workload(spec, tmp.path("run"));
  for (const auto& r : results) REQUIRE(r.error_text() == "");
  const auto logged = test::metrics_lines(tmp.path("run"));
  REQUIRE(logged.size() == 6);

  core::ckpt::export_hf(core::ckpt::step_dir(tmp.path("run"), 3), tmp.path("step-3-model"));
  std::ofstream(tmp.path("batch-4.json")) << global_batch_ids(spec, 3);
  const double loss = eval_loss(tmp.path("step-3-model"), tmp.path("batch-4.json"));
  const double step4 = logged[3]["loss"].get<double>();
  CHECK(std::abs(loss - step4) <= 1e-5 * std::abs(step4));

  // The final model, exported by the job itself, is the weights after step 6.
  struct stat st {};
  REQUIRE(::stat((tmp.path("run") + "/model/model.safetensors").c_str(), &st) == 0);
  REQUIRE(::stat((tmp.path("run") + "/model/config.json").c_str(), &st) == 0);
  const double final_loss = eval_loss(tmp.path("run") + "/model", tmp.path("batch-4.json"));
  CHECK(final_loss < loss);  // trained on two more steps
  CHECK(test::contains_line(results[0].value->log, "exported to", "/model"));
}
